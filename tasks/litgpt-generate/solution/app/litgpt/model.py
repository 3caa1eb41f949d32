"""litgpt's decoder-only GPT (Llama family) as pure functions over a parameter pytree, with an
explicit KV cache.

Parameters follow litgpt's state-dict names: `params["transformer"]["h"][i]["attn"]["qkv"]["weight"]`
and so on, each linear weight in litgpt's layout `[out_features, in_features]`. Where litgpt
writes keys and values into `KVCache` buffers in place, `forward` takes the cache (a list of
`KVCache(k, v)`, one per layer) and returns the updated one.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from litgpt.config import Config

Params = dict[str, Any]


class KVCache(NamedTuple):
    """One layer's cache. k, v: `[batch_size, n_query_groups, max_seq_length, head_size]`."""

    k: jax.Array
    v: jax.Array


def init_kv_cache(config: Config, batch_size: int, max_seq_length: int | None = None,
                  dtype: Any = jnp.float32) -> list[KVCache]:  # fmt: skip
    """Zeroed caches for every layer (`GPT.set_kv_cache`)."""
    length = config.block_size if max_seq_length is None else max_seq_length
    if length > config.block_size:
        raise ValueError(f"Cannot attend to {length}, block size is only {config.block_size}.")
    shape = (batch_size, config.n_query_groups, length, config.head_size)
    return [KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.n_layer)]


def kv_cache_update(cache: KVCache, input_pos: jax.Array, k: jax.Array, v: jax.Array) -> KVCache:
    """Write `k`, `v` at `input_pos` along the sequence axis (`KVCache.forward`).

    Args:
        cache: buffers `[B_cache, G, S, hs]`; rows `[:B]` are written, B = k.shape[0].
        input_pos: `[T]` (the same positions for every row) or `[B, T]`.
        k, v: `[B, G, T, hs]`.

    Returns:
        The updated cache, cut to the batch size B (litgpt returns `self.k[:bs]`).
    """
    B = k.shape[0]
    k, v = jnp.asarray(k), jnp.asarray(v)
    ck, cv = jnp.asarray(cache.k)[:B].astype(k.dtype), jnp.asarray(cache.v)[:B].astype(v.dtype)
    input_pos = jnp.asarray(input_pos, jnp.int32)
    if input_pos.ndim == 1:
        ck = ck.at[:, :, input_pos].set(k)
        cv = cv.at[:, :, input_pos].set(v)
    else:
        rows = jnp.arange(B)[:, None]
        ck = ck.transpose(0, 2, 1, 3).at[rows, input_pos].set(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        cv = cv.transpose(0, 2, 1, 3).at[rows, input_pos].set(v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    return KVCache(ck, cv)


def build_rope_cache(seq_len: int, n_elem: int, base: int = 10000, condense_ratio: int = 1) -> tuple[jax.Array, jax.Array]:
    """The RoPE tables (`build_rope_cache`).

    Returns:
        cos, sin: `[seq_len, n_elem]`, each frequency repeated for both halves.
    """
    theta = 1.0 / (base ** (jnp.arange(0, n_elem, 2, dtype=jnp.float32) / n_elem))
    positions = jnp.arange(seq_len, dtype=jnp.float32) / condense_ratio
    angles = jnp.tile(jnp.outer(positions, theta), (1, 2))[:, :n_elem]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate the two halves of the last axis (litgpt's non-interleaved layout).

    Args:
        x: `[B, n_heads, T, n_elem]`; cos, sin: `[B or 1, T, n_elem]`.
    """
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos[:, None], sin[:, None]
    return (x * cos + rotated * sin).astype(x.dtype)


def build_mask_cache(max_seq_length: int) -> jax.Array:
    """`[1, 1, S, S]` booleans: position i may attend to positions <= i."""
    return jnp.tril(jnp.ones((max_seq_length, max_seq_length), dtype=bool))[None, None]


def rms_norm(x: jax.Array, weight: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMSNorm over the last axis, computed in float32, returned in x's dtype. x: `[..., size]`."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def linear(p: Params, x: jax.Array) -> jax.Array:
    """`x @ weight.T` (+ bias), with litgpt's `[out, in]` weight."""
    y = x @ p["weight"].T
    return y + p["bias"] if "bias" in p else y


def llama_mlp(p: Params, x: jax.Array) -> jax.Array:
    """SwiGLU (`LLaMAMLP`): `proj(silu(fc_1(x)) * fc_2(x))`."""
    return linear(p["proj"], jax.nn.silu(linear(p["fc_1"], x)) * linear(p["fc_2"], x))


def scaled_dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """Softmax attention. q: `[B, nh, T, hs]`; k, v: `[B, nh, S, hs]`; mask: `[B or 1, 1, T, S]` booleans.

    Returns:
        `[B, T, nh, hs]`.
    """
    scores = (q @ k.transpose(0, 1, 3, 2)) * scale
    scores = jnp.where(mask, scores.astype(jnp.float32), -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return (weights @ v).transpose(0, 2, 1, 3)


def causal_self_attention(
    p: Params, config: Config, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
    input_pos: jax.Array | None = None, kv_cache: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:  # fmt: skip
    """Grouped-query attention with RoPE; with `input_pos`, through the KV cache.

    Args:
        x: `[B, T, n_embd]`; cos, sin: `[B or 1, T, rope_n_elem]`; mask: `[B or 1, 1, T, S]`.

    Returns:
        `[B, T, n_embd]` and the updated cache (None without one).
    """
    B, T, _ = x.shape
    hs, nh, ng, n_rope = config.head_size, config.n_head, config.n_query_groups, config.rope_n_elem
    q, k, v = jnp.split(linear(p["qkv"], x), [nh * hs, nh * hs + ng * hs], axis=-1)
    q = q.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)
    k = k.reshape(B, T, ng, hs).transpose(0, 2, 1, 3)
    v = v.reshape(B, T, ng, hs).transpose(0, 2, 1, 3)
    q = jnp.concatenate([apply_rope(q[..., :n_rope], cos, sin), q[..., n_rope:]], axis=-1)
    k = jnp.concatenate([apply_rope(k[..., :n_rope], cos, sin), k[..., n_rope:]], axis=-1)
    if input_pos is not None:
        kv_cache = kv_cache_update(kv_cache, input_pos, k, v)
        k, v = kv_cache.k, kv_cache.v
    if ng != nh:  # each key/value head serves nh // ng consecutive query heads
        k = jnp.repeat(k, nh // ng, axis=1)
        v = jnp.repeat(v, nh // ng, axis=1)
    y = scaled_dot_product_attention(q, k, v, mask, 1.0 / math.sqrt(hs))
    return linear(p["proj"], y.reshape(B, T, nh * hs)), kv_cache


def block(
    p: Params, config: Config, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
    input_pos: jax.Array | None = None, kv_cache: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:  # fmt: skip
    """One non-parallel-residual transformer block (`Block.forward`)."""
    h, kv_cache = causal_self_attention(
        p["attn"], config, rms_norm(x, p["norm_1"]["weight"], config.norm_eps), cos, sin, mask, input_pos, kv_cache
    )
    x = h + x
    return llama_mlp(p["mlp"], rms_norm(x, p["norm_2"]["weight"], config.norm_eps)) + x, kv_cache


def forward(
    params: Params, config: Config, idx: jax.Array, input_pos: jax.Array | None = None,
    kv_cache: list[KVCache] | None = None,
) -> tuple[jax.Array, list[KVCache] | None]:  # fmt: skip
    """`GPT.forward`: token ids to logits, through the KV cache when `input_pos` is given (compiled once
    per config and shapes; see `forward_eager`)."""
    if input_pos is not None and kv_cache is None:
        raise TypeError("forward with input_pos needs the kv_cache (init_kv_cache)")
    return _forward_jit(params, config, idx, input_pos, kv_cache)


def forward_eager(
    params: Params, config: Config, idx: jax.Array, input_pos: jax.Array | None = None,
    kv_cache: list[KVCache] | None = None,
) -> tuple[jax.Array, list[KVCache] | None]:  # fmt: skip
    """`GPT.forward`: token ids to logits, through the KV cache when `input_pos` is given.

    Args:
        idx: `[B, T]` token ids.
        input_pos: None (a plain causal forward, no cache), or the positions of `idx`:
            `[T]` (every row) or `[B, T]`; keys and values are written there and each token
            attends to the cached positions up to its own.
        kv_cache: with `input_pos`, the caches of every layer (`init_kv_cache`).

    Returns:
        logits `[B, T, padded_vocab_size]` and the updated cache (None without one).
    """
    idx = jnp.asarray(idx, jnp.int32)
    T = idx.shape[1]
    if input_pos is None:
        if T > config.block_size:
            raise ValueError(f"Cannot forward sequence of length {T}, max seq length is only {config.block_size}.")
        cos, sin = build_rope_cache(T, config.rope_n_elem, config.rope_base, config.rope_condense_ratio)
        cos, sin, mask = cos[None], sin[None], build_mask_cache(T)
    else:
        if kv_cache is None:
            raise TypeError("forward with input_pos needs the kv_cache (init_kv_cache)")
        input_pos = jnp.asarray(input_pos, jnp.int32)
        if input_pos.shape[-1] != T:
            raise ValueError(f"input_pos.shape[-1] = {input_pos.shape[-1]} != {T} = idx.shape[1]")
        max_seq_length = kv_cache[0].k.shape[2]
        cos, sin = build_rope_cache(max_seq_length, config.rope_n_elem, config.rope_base, config.rope_condense_ratio)
        cos, sin = cos[input_pos], sin[input_pos]
        mask = build_mask_cache(max_seq_length)[0, 0][input_pos]  # [T, S] or [B, T, S]
        if input_pos.ndim == 1:
            cos, sin, mask = cos[None], sin[None], mask[None, None]
        else:
            mask = mask[:, None]
    x = params["transformer"]["wte"]["weight"][idx]
    if config.scale_embeddings:
        x = x * jnp.asarray(config.n_embd**0.5, dtype=x.dtype)
    new_cache = [] if input_pos is not None else None
    for i, layer in enumerate(params["transformer"]["h"]):
        x, layer_cache = block(layer, config, x, cos, sin, mask, input_pos,
                               None if input_pos is None else kv_cache[i])  # fmt: skip
        if new_cache is not None:
            new_cache.append(layer_cache)
    x = rms_norm(x, params["transformer"]["ln_f"]["weight"], config.norm_eps)
    return linear(params["lm_head"], x), new_cache


_forward_jit = jax.jit(forward_eager, static_argnums=(1,))
