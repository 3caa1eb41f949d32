"""Causal grouped-query self-attention."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from llama_sft.config import ModelConfig
from llama_sft.lora import lora_linear
from llama_sft.modeling.rotary import apply_rotary


def repeat_kv(x: jax.Array, n_rep: int) -> jax.Array:
    """[B, T, KV, D] -> [B, T, KV * n_rep, D]; query head h reads kv head h // n_rep."""
    return x if n_rep == 1 else jnp.repeat(x, n_rep, axis=2)


def attention(
    layer: dict,
    adapters: dict | None,
    x: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    cfg: ModelConfig,
    scale: float,
) -> jax.Array:
    """x [B, T, dim] -> [B, T, dim]; position t attends to positions <= t.

    `layer` holds q_proj/k_proj/v_proj/o_proj kernels; `adapters` the LoRA factors of
    the same names (or None for the base model).
    """
    b, t, _ = x.shape
    ad = adapters or {}
    q = lora_linear(x, layer["q_proj"], ad.get("q_proj"), scale).reshape(b, t, cfg.n_heads, cfg.head_dim)
    k = lora_linear(x, layer["k_proj"], ad.get("k_proj"), scale).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
    v = lora_linear(x, layer["v_proj"], ad.get("v_proj"), scale).reshape(b, t, cfg.n_kv_heads, cfg.head_dim)
    q = apply_rotary(q, cos, sin)
    k = apply_rotary(k, cos, sin)
    n_rep = cfg.n_heads // cfg.n_kv_heads
    k = repeat_kv(k, n_rep)
    v = repeat_kv(v, n_rep)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.head_dim)
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    scores = jnp.where(causal[None, None], scores, -jnp.inf)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, cfg.n_heads * cfg.head_dim)
    return lora_linear(out, layer["o_proj"], ad.get("o_proj"), scale)
