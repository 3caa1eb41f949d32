"""The Llama-style decoder with separate prefill and decode entry points."""

from __future__ import annotations

import torch
from torch import nn

from paged_serve.attention import Attention
from paged_serve.config import ModelConfig
from paged_serve.kv_cache import PagedKVCache
from paged_serve.layers import RMSNorm, SwiGLU


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.dim, config.norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.dim, config.norm_eps)
        self.mlp = SwiGLU(config.dim, config.hidden_dim)

    def finish(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        h = x + attn_out
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaBackbone(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)


class LlamaForCausalLM(nn.Module):
    """Token ids in, next-token logits out; keys/values go to a `PagedKVCache`."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = LlamaBackbone(config)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False)

    @torch.no_grad()
    def prefill(
        self, tokens: torch.Tensor, lengths: torch.Tensor, cache: PagedKVCache, slot_mapping: torch.Tensor
    ) -> torch.Tensor:
        """Run right-padded prompts and fill their cache slots.

        Args:
            tokens: [B, T] prompt ids (padding past `lengths` is arbitrary).
            lengths: [B] prompt lengths.
            cache: the paged cache, written in place.
            slot_mapping: [B, T] cache slot per token, -1 for padding.

        Returns:
            logits: [B, T, vocab].
        """
        positions = torch.arange(tokens.shape[1])[None, :].expand_as(tokens)
        x = self.model.embed_tokens(tokens)
        for i, layer in enumerate(self.model.layers):
            k_cache, v_cache = cache.layer(i)
            attn = layer.self_attn.forward_prefill(
                layer.input_layernorm(x), positions, lengths, k_cache, v_cache, slot_mapping
            )
            x = layer.finish(x, attn)
        return self.lm_head(self.model.norm(x))

    @torch.no_grad()
    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: PagedKVCache,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> torch.Tensor:
        """One step for a batch of running sequences.

        Args:
            tokens: [B] the last token of each sequence (not yet cached).
            positions: [B] its position.
            cache: the paged cache, written in place.
            block_tables: [B, M] block ids of each sequence.
            context_lens: [B] tokens to attend to, including this one (positions + 1).
            slot_mapping: [B] where this token's key/value goes.

        Returns:
            logits: [B, vocab].
        """
        x = self.model.embed_tokens(tokens)
        for i, layer in enumerate(self.model.layers):
            k_cache, v_cache = cache.layer(i)
            attn = layer.self_attn.forward_decode(
                layer.input_layernorm(x), positions, k_cache, v_cache, block_tables, context_lens, slot_mapping
            )
            x = layer.finish(x, attn)
        return self.lm_head(self.model.norm(x))
