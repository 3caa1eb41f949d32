"""The Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""
