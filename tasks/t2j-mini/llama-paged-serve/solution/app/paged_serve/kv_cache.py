"""The paged KV cache as a value: pools of fixed-size blocks per layer, indexed through block tables.

A token at position `p` of a sequence lives in slot
`block_table[p // block_size] * block_size + p % block_size` of the pool. Writing
returns new pools; callers thread the cache through each step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from paged_serve.config import ModelConfig

Array = jax.Array


class KVCache(NamedTuple):
    """k, v: [n_layers, num_blocks, block_size, n_kv_heads, head_dim]."""

    k: Array
    v: Array


def init_cache(config: ModelConfig, num_blocks: int, block_size: int) -> KVCache:
    shape = (config.n_layers, num_blocks, block_size, config.n_kv_heads, config.head_dim)
    return KVCache(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))


@jax.jit
def write_to_cache(
    k_cache: Array, v_cache: Array, k: Array, v: Array, slot_mapping: Array
) -> tuple[Array, Array]:
    """Store new keys/values in their slots.

    Args:
        k_cache, v_cache: [num_blocks, block_size, KV, D] pools of one layer.
        k, v: [N, KV, D] keys/values of N new tokens.
        slot_mapping: [N] slot of each token; -1 marks padding, which is not written.

    Returns:
        The updated (k_cache, v_cache).
    """
    k_cache, v_cache = jnp.asarray(k_cache), jnp.asarray(v_cache)
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    total = num_blocks * block_size
    slots = jnp.where(slot_mapping >= 0, slot_mapping, total)
    k_flat = k_cache.reshape(total, kv_heads, head_dim).at[slots].set(k, mode="drop")
    v_flat = v_cache.reshape(total, kv_heads, head_dim).at[slots].set(v, mode="drop")
    return k_flat.reshape(k_cache.shape), v_flat.reshape(v_cache.shape)


def gather_from_cache(cache: Array, block_tables: Array) -> Array:
    """Read the contiguous history of each sequence out of the pool.

    Args:
        cache: [num_blocks, block_size, KV, D] pool of one layer.
        block_tables: [B, M] block ids of each sequence.

    Returns:
        [B, M * block_size, KV, D]: position p of sequence b at index p.
    """
    cache, block_tables = jnp.asarray(cache), jnp.asarray(block_tables)
    block_size = cache.shape[1]
    positions = jnp.arange(block_tables.shape[1] * block_size)
    blocks = block_tables[:, positions // block_size]
    slots = blocks * block_size + positions % block_size
    return cache.reshape(-1, *cache.shape[2:])[slots]
