"""The paged KV cache: a pool of fixed-size blocks per layer, indexed through block tables.

A token at position `p` of a sequence lives in slot
`block_table[p // block_size] * block_size + p % block_size` of the pool.
"""

from __future__ import annotations

import torch

from paged_serve.config import ModelConfig


class PagedKVCache:
    """Key and value pools for every layer: [num_blocks, block_size, n_kv_heads, head_dim] each."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int):
        shape = (num_blocks, block_size, config.n_kv_heads, config.head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.k = [torch.zeros(shape) for _ in range(config.n_layers)]
        self.v = [torch.zeros(shape) for _ in range(config.n_layers)]

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[index], self.v[index]


def write_to_cache(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Store new keys/values in their slots, in place.

    Args:
        k_cache, v_cache: [num_blocks, block_size, KV, D] pools of one layer.
        k, v: [N, KV, D] keys/values of N new tokens.
        slot_mapping: [N] slot of each token; -1 marks padding, which is not written.
    """
    kv_heads, head_dim = k_cache.shape[-2:]
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    k_cache.view(-1, kv_heads, head_dim)[slots] = k[valid]
    v_cache.view(-1, kv_heads, head_dim)[slots] = v[valid]


def gather_from_cache(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """Read the contiguous history of each sequence out of the pool.

    Args:
        cache: [num_blocks, block_size, KV, D] pool of one layer.
        block_tables: [B, M] block ids of each sequence (unused entries may hold any valid id).

    Returns:
        [B, M * block_size, KV, D]: position p of sequence b at index p.
    """
    block_size = cache.shape[1]
    positions = torch.arange(block_tables.shape[1] * block_size)
    blocks = block_tables[:, positions // block_size]
    slots = blocks * block_size + positions % block_size
    return cache.view(-1, *cache.shape[2:])[slots]
