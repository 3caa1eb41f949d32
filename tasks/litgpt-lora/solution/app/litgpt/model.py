"""The decoder-only GPT of litgpt (Llama family), as pure functions over a parameter pytree.

Parameters follow litgpt's module names: `params["transformer"]["h"][i]["attn"]["qkv"]` and so on,
each linear a dict holding `weight` in litgpt's layout `[out_features, in_features]`. A linear
layer is applied through a `linear(p, x)` function, so that `litgpt.lora` can swap in its LoRA
layers without a second copy of the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from litgpt.config import Config

Params = dict[str, Any]
Linear = Callable[[Params, jax.Array], jax.Array]


def dense(p: Params, x: jax.Array) -> jax.Array:
    """`x @ weight.T` (+ bias): a linear layer with litgpt's `[out, in]` weight.

    A LoRA-wrapped layer (`{"linear": {...}, "lora_A", "lora_B"}`) is applied without its
    LoRA update: the base model's view of the LoRA model's parameters.
    """
    p = p.get("linear", p)
    y = x @ p["weight"].T
    return y + p["bias"] if "bias" in p else y


def rms_norm(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMSNorm over the last axis, computed in float32, returned in x's dtype.

    Args:
        x: `[..., size]`; weight: `[size]`.
    """
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def build_rope_cache(seq_len: int, n_elem: int, base: int = 10000, condense_ratio: int = 1) -> tuple[jax.Array, jax.Array]:
    """The RoPE tables.

    Returns:
        cos, sin: `[seq_len, n_elem]`, each frequency repeated for both halves.
    """
    theta = 1.0 / (base ** (jnp.arange(0, n_elem, 2, dtype=jnp.float32)[: n_elem // 2] / n_elem))
    positions = jnp.arange(seq_len, dtype=jnp.float32) / condense_ratio
    angles = jnp.outer(positions, theta)
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the halves of the last axis (non-interleaved layout).

    Args:
        x: `[B, n_heads, T, n_elem]`; cos, sin: `[T, n_elem]` or `[B, T, n_elem]`.
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    if cos.ndim == 3:
        cos, sin = cos[:, None], sin[:, None]
    return (x * cos + rotated * sin).astype(x.dtype)


def causal_self_attention(
    p: Params, config: Config, x: jax.Array, cos: jax.Array, sin: jax.Array, linear: Linear = dense
) -> jax.Array:
    """Grouped-query causal self-attention with RoPE.

    Args:
        x: `[B, T, n_embd]`; cos, sin: `[T, rope_n_elem]`.

    Returns:
        `[B, T, n_embd]`.
    """
    B, T, _ = x.shape
    hs, nh, ng, n_rope = config.head_size, config.n_head, config.n_query_groups, config.rope_n_elem
    qkv = linear(p["qkv"], x)
    q, k, v = jnp.split(qkv, [nh * hs, nh * hs + ng * hs], axis=-1)
    q = q.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)
    k = k.reshape(B, T, ng, hs).transpose(0, 2, 1, 3)
    v = v.reshape(B, T, ng, hs).transpose(0, 2, 1, 3)
    q = jnp.concatenate([apply_rope(q[..., :n_rope], cos, sin), q[..., n_rope:]], axis=-1)
    k = jnp.concatenate([apply_rope(k[..., :n_rope], cos, sin), k[..., n_rope:]], axis=-1)
    if ng != nh:  # each key/value head serves nh // ng consecutive query heads
        k = jnp.repeat(k, nh // ng, axis=1)
        v = jnp.repeat(v, nh // ng, axis=1)
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hs))
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    y = (weights @ v).transpose(0, 2, 1, 3).reshape(B, T, nh * hs)
    return linear(p["proj"], y)


def llama_mlp(p: Params, x: jax.Array, linear: Linear = dense) -> jax.Array:
    """SwiGLU: `proj(silu(fc_1(x)) * fc_2(x))`."""
    return linear(p["proj"], jax.nn.silu(linear(p["fc_1"], x)) * linear(p["fc_2"], x))


def block(p: Params, config: Config, x: jax.Array, cos: jax.Array, sin: jax.Array, linear: Linear = dense) -> jax.Array:
    """One non-parallel-residual transformer block."""
    x = causal_self_attention(p["attn"], config, rms_norm(x, p["norm_1"]["weight"], config.norm_eps), cos, sin, linear) + x
    return llama_mlp(p["mlp"], rms_norm(x, p["norm_2"]["weight"], config.norm_eps), linear) + x


def gpt_forward(params: Params, config: Config, idx: jax.Array, linear: Linear = dense) -> jax.Array:
    """Token ids `[B, T]` to logits `[B, T, padded_vocab_size]`."""
    T = idx.shape[1]
    if T > config.block_size:
        raise ValueError(f"Cannot forward sequence of length {T}, block size is only {config.block_size}.")
    cos, sin = build_rope_cache(T, config.rope_n_elem, config.rope_base, config.rope_condense_ratio)
    x = params["transformer"]["wte"]["weight"][idx]
    if config.scale_embeddings:
        x = x * jnp.asarray(config.n_embd**0.5, dtype=x.dtype)
    for layer in params["transformer"]["h"]:
        x = block(layer, config, x, cos, sin, linear)
    x = rms_norm(x, params["transformer"]["ln_f"]["weight"], config.norm_eps)
    return linear(params["lm_head"], x)
