"""The decoder: token embedding, pre-norm blocks, final norm, untied output head."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from llama_sft.config import ModelConfig
from llama_sft.modeling.attention import attention
from llama_sft.modeling.mlp import swiglu
from llama_sft.modeling.norm import rms_norm
from llama_sft.modeling.rotary import rope_cos_sin


def decoder_block(layer, adapters, x, cos, sin, cfg: ModelConfig, scale: float) -> jax.Array:
    """One pre-norm block: x [B, T, dim] -> [B, T, dim]."""
    x = x + attention(layer, adapters, rms_norm(x, layer["attn_norm"], cfg.norm_eps), cos, sin, cfg, scale)
    return x + swiglu(layer, adapters, rms_norm(x, layer["mlp_norm"], cfg.norm_eps), scale)


def forward(params: dict, lora: dict | None, input_ids: jax.Array, cfg: ModelConfig, scale: float = 0.0) -> jax.Array:
    """input_ids [B, T] -> logits [B, T, vocab_size] (float32).

    `lora` is the adapter pytree (or None for the base model); `scale` is alpha / rank.
    """
    t = input_ids.shape[1]
    cos, sin = rope_cos_sin(jnp.arange(t), cfg.head_dim, cfg.rope_theta)
    x = params["embed"][input_ids]
    for i, layer in enumerate(params["layers"]):
        adapters = None if lora is None else lora["layers"][i]
        x = decoder_block(layer, adapters, x, cos, sin, cfg, scale)
    return (rms_norm(x, params["final_norm"], cfg.norm_eps) @ params["lm_head"]).astype(jnp.float32)
