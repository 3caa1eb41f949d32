"""Grouped-query attention: dense causal attention for prefill, paged attention for decode."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from paged_serve.kv_cache import gather_from_cache

Array = jax.Array


def expand_kv_heads(x: Array, n_heads: int) -> Array:
    """[..., KV, D] -> [..., H, D]: query head h reads key/value head h // (H // KV)."""
    return jnp.repeat(x, n_heads // x.shape[-2], axis=-2)


@jax.jit
def prefill_attention(q: Array, k: Array, v: Array, lengths: Array) -> Array:
    """Causal attention over right-padded prompts.

    Args:
        q: [B, T, H, D]; k, v: [B, T, KV, D]; lengths: [B] real prompt lengths.

    Returns:
        [B, T, H, D]; rows past a prompt's length are padding (finite, ignored).
    """
    n_heads, head_dim = q.shape[-2:]
    seq = q.shape[1]
    k, v = expand_kv_heads(k, n_heads), expand_kv_heads(v, n_heads)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * head_dim**-0.5
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    key_valid = jnp.arange(seq)[None, :] < lengths[:, None]
    mask = causal[None, None] & key_valid[:, None, None, :]
    weights = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


@jax.jit
def paged_decode_attention(
    q: Array, k_cache: Array, v_cache: Array, block_tables: Array, context_lens: Array
) -> Array:
    """One new query per sequence against its cached history.

    Args:
        q: [B, H, D] queries of the tokens being decoded.
        k_cache, v_cache: [num_blocks, block_size, KV, D] pools of one layer.
        block_tables: [B, M] block ids per sequence.
        context_lens: [B] number of cached tokens to attend to (including the new one).

    Returns:
        [B, H, D].
    """
    n_heads, head_dim = q.shape[-2:]
    k = expand_kv_heads(gather_from_cache(k_cache, block_tables), n_heads)
    v = expand_kv_heads(gather_from_cache(v_cache, block_tables), n_heads)
    scores = jnp.einsum("bhd,blhd->bhl", q, k) * head_dim**-0.5
    valid = jnp.arange(k.shape[1])[None, :] < context_lens[:, None]
    weights = jax.nn.softmax(jnp.where(valid[:, None, :], scores, -jnp.inf), axis=-1)
    return jnp.einsum("bhl,blhd->bhd", weights, v)
