"""Grouped-query attention: dense causal attention for prefill, paged attention for decode."""

from __future__ import annotations

import torch
from torch import nn

from paged_serve.config import ModelConfig
from paged_serve.kv_cache import gather_from_cache, write_to_cache
from paged_serve.layers import apply_rotary


def expand_kv_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[..., KV, D] -> [..., H, D]: query head h reads key/value head h // (H // KV)."""
    return x.repeat_interleave(n_heads // x.shape[-2], dim=-2)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Causal attention over right-padded prompts.

    Args:
        q: [B, T, H, D]; k, v: [B, T, KV, D]; lengths: [B] real prompt lengths.

    Returns:
        [B, T, H, D]; rows past a prompt's length are padding (finite, ignored).
    """
    n_heads, head_dim = q.shape[-2:]
    seq = q.shape[1]
    k, v = expand_kv_heads(k, n_heads), expand_kv_heads(v, n_heads)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * head_dim**-0.5
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    key_valid = torch.arange(seq)[None, :] < lengths[:, None]
    mask = causal[None, None] & key_valid[:, None, None, :]
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> torch.Tensor:
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
    scores = torch.einsum("bhd,blhd->bhl", q, k) * head_dim**-0.5
    valid = torch.arange(k.shape[1])[None, :] < context_lens[:, None]
    weights = scores.masked_fill(~valid[:, None, :], float("-inf")).softmax(dim=-1)
    return torch.einsum("bhl,blhd->bhd", weights, v)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        d = config.head_dim
        self.q_proj = nn.Linear(config.dim, config.n_heads * d, bias=False)
        self.k_proj = nn.Linear(config.dim, config.n_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(config.dim, config.n_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(config.n_heads * d, config.dim, bias=False)

    def _project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.config
        q = self.q_proj(x).unflatten(-1, (c.n_heads, c.head_dim))
        k = self.k_proj(x).unflatten(-1, (c.n_kv_heads, c.head_dim))
        v = self.v_proj(x).unflatten(-1, (c.n_kv_heads, c.head_dim))
        return apply_rotary(q, positions, c.rope_theta), apply_rotary(k, positions, c.rope_theta), v

    def forward_prefill(self, x, positions, lengths, k_cache, v_cache, slot_mapping):
        """x: [B, T, dim]; positions, slot_mapping: [B, T]; writes the prompt's keys/values."""
        q, k, v = self._project(x, positions)
        c = self.config
        write_to_cache(
            k_cache, v_cache, k.reshape(-1, c.n_kv_heads, c.head_dim),
            v.reshape(-1, c.n_kv_heads, c.head_dim), slot_mapping.reshape(-1),
        )
        return self.o_proj(prefill_attention(q, k, v, lengths).flatten(-2))

    def forward_decode(self, x, positions, k_cache, v_cache, block_tables, context_lens, slot_mapping):
        """x: [B, dim]; positions, context_lens, slot_mapping: [B]; block_tables: [B, M]."""
        q, k, v = self._project(x, positions)
        write_to_cache(k_cache, v_cache, k, v, slot_mapping)
        out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens)
        return self.o_proj(out.flatten(-2))
