"""The Llama-style decoder as pure functions over parameter pytrees.

Base parameters (`Params`), converted from the raw checkpoint:
    {"embed": [V, D],
     "layers": [{"attn_norm": [D], "q_proj": [D, H*hd], "k_proj": [D, KV*hd],
                 "v_proj": [D, KV*hd], "o_proj": [H*hd, D], "mlp_norm": [D],
                 "gate_proj": [D, F], "up_proj": [D, F], "down_proj": [F, D]}, ...],
     "final_norm": [D], "lm_head": [D, V]}
Linear kernels are [in, out]: y = x @ kernel.
"""
