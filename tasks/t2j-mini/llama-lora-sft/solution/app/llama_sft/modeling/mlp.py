"""SwiGLU feed-forward block."""

from __future__ import annotations

import jax

from llama_sft.lora import lora_linear


def swiglu(layer: dict, adapters: dict | None, x: jax.Array, scale: float) -> jax.Array:
    """x [B, T, dim] -> down(silu(gate(x)) * up(x)) [B, T, dim]."""
    ad = adapters or {}
    gate = lora_linear(x, layer["gate_proj"], ad.get("gate_proj"), scale)
    up = lora_linear(x, layer["up_proj"], ad.get("up_proj"), scale)
    return lora_linear(jax.nn.silu(gate) * up, layer["down_proj"], ad.get("down_proj"), scale)
