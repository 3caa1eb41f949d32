"""llama_sft: LoRA supervised fine-tuning of a small Llama-style decoder (JAX + optax)."""

__version__ = "0.3.0"
