"""The Llama-style decoder as pure functions of an explicit parameter pytree.

Params (see `checkpoint.load_params`):
    embed [V, dim]; norm [dim]; lm_head [dim, V];
    layers: list of {attn_norm [dim], wq [dim, H*D], wk [dim, KV*D], wv [dim, KV*D],
                     wo [H*D, dim], mlp_norm [dim], w_gate [dim, F], w_up [dim, F], w_down [F, dim]}
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from paged_serve.attention import paged_decode_attention, prefill_attention
from paged_serve.config import ModelConfig
from paged_serve.kv_cache import KVCache, write_to_cache
from paged_serve.layers import apply_rotary, rms_norm, swiglu

Array = jax.Array
Params = dict[str, Any]


def _project(layer: Params, config: ModelConfig, x: Array, positions: Array) -> tuple[Array, Array, Array]:
    """x: [..., dim] -> q [..., H, D], k/v [..., KV, D] (q and k rotated)."""
    c = config
    h = rms_norm(x, layer["attn_norm"], c.norm_eps)
    q = (h @ layer["wq"]).reshape(*x.shape[:-1], c.n_heads, c.head_dim)
    k = (h @ layer["wk"]).reshape(*x.shape[:-1], c.n_kv_heads, c.head_dim)
    v = (h @ layer["wv"]).reshape(*x.shape[:-1], c.n_kv_heads, c.head_dim)
    return apply_rotary(q, positions, c.rope_theta), apply_rotary(k, positions, c.rope_theta), v


def _finish(layer: Params, config: ModelConfig, x: Array, attn: Array) -> Array:
    h = x + attn.reshape(*attn.shape[:-2], -1) @ layer["wo"]
    mlp_in = rms_norm(h, layer["mlp_norm"], config.norm_eps)
    return h + swiglu(mlp_in, layer["w_gate"], layer["w_up"], layer["w_down"])


def _logits(params: Params, config: ModelConfig, x: Array) -> Array:
    return rms_norm(x, params["norm"], config.norm_eps) @ params["lm_head"]


@partial(jax.jit, static_argnums=1)
def prefill(
    params: Params, config: ModelConfig, cache: KVCache, tokens: Array, lengths: Array, slot_mapping: Array
) -> tuple[Array, KVCache]:
    """Run right-padded prompts and fill their cache slots.

    Args:
        params: parameter pytree.
        config: model shape (static).
        cache: the paged cache.
        tokens: [B, T] prompt ids (padding past `lengths` is arbitrary).
        lengths: [B] prompt lengths.
        slot_mapping: [B, T] cache slot per token, -1 for padding.

    Returns:
        logits [B, T, vocab] and the updated cache.
    """
    c = config
    tokens = jnp.asarray(tokens, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = params["embed"][tokens]
    ks, vs = [], []
    for i, layer in enumerate(params["layers"]):
        q, k, v = _project(layer, c, x, positions)
        k_cache, v_cache = write_to_cache(
            cache.k[i], cache.v[i], k.reshape(-1, c.n_kv_heads, c.head_dim),
            v.reshape(-1, c.n_kv_heads, c.head_dim), jnp.reshape(slot_mapping, -1),
        )
        ks.append(k_cache)
        vs.append(v_cache)
        x = _finish(layer, c, x, prefill_attention(q, k, v, lengths))
    return _logits(params, c, x), KVCache(jnp.stack(ks), jnp.stack(vs))


@partial(jax.jit, static_argnums=1)
def decode(
    params: Params,
    config: ModelConfig,
    cache: KVCache,
    tokens: Array,
    positions: Array,
    block_tables: Array,
    context_lens: Array,
    slot_mapping: Array,
) -> tuple[Array, KVCache]:
    """One step for a batch of running sequences.

    Args:
        params: parameter pytree.
        config: model shape (static).
        cache: the paged cache.
        tokens: [B] the last token of each sequence (not yet cached).
        positions: [B] its position.
        block_tables: [B, M] block ids of each sequence.
        context_lens: [B] tokens to attend to, including this one (positions + 1).
        slot_mapping: [B] where this token's key/value goes.

    Returns:
        logits [B, vocab] and the updated cache.
    """
    c = config
    x = params["embed"][jnp.asarray(tokens, jnp.int32)]
    ks, vs = [], []
    for i, layer in enumerate(params["layers"]):
        q, k, v = _project(layer, c, x, positions)
        k_cache, v_cache = write_to_cache(cache.k[i], cache.v[i], k, v, slot_mapping)
        ks.append(k_cache)
        vs.append(v_cache)
        attn = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens)
        x = _finish(layer, c, x, attn)
    return _logits(params, c, x), KVCache(jnp.stack(ks), jnp.stack(vs))
