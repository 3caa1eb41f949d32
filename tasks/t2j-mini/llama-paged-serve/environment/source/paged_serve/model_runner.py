"""Turns a scheduled batch of sequences into model inputs and runs one step."""

from __future__ import annotations

import torch

from paged_serve.block_manager import slot_for
from paged_serve.config import EngineConfig, ModelConfig
from paged_serve.kv_cache import PagedKVCache
from paged_serve.model import LlamaForCausalLM
from paged_serve.sequence import Sequence


class ModelRunner:
    """Owns the model and its KV cache; returns next-token logits for each scheduled sequence."""

    def __init__(self, model: LlamaForCausalLM, config: ModelConfig, engine_config: EngineConfig):
        self.model = model
        self.config = config
        self.engine_config = engine_config
        self.cache = PagedKVCache(config, engine_config.num_blocks, engine_config.block_size)

    def prefill(self, seqs: list[Sequence]) -> torch.Tensor:
        """Logits after each prompt's last token: [B, vocab]."""
        bs = self.engine_config.block_size
        lengths = [len(s.prompt_token_ids) for s in seqs]
        width = max(lengths)
        tokens = torch.full((len(seqs), width), self.config.pad_token_id, dtype=torch.long)
        slots = torch.full((len(seqs), width), -1, dtype=torch.long)
        for b, seq in enumerate(seqs):
            tokens[b, : lengths[b]] = torch.tensor(seq.prompt_token_ids)
            slots[b, : lengths[b]] = torch.tensor([slot_for(seq.block_table, p, bs) for p in range(lengths[b])])
        lengths_t = torch.tensor(lengths)
        logits = self.model.prefill(tokens, lengths_t, self.cache, slots)
        return logits[torch.arange(len(seqs)), lengths_t - 1]

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """Logits after each sequence's last token: [B, vocab]."""
        bs = self.engine_config.block_size
        positions = torch.tensor([len(s) - 1 for s in seqs])
        tokens = torch.tensor([s.last_token_id for s in seqs])
        tables = torch.zeros((len(seqs), self.engine_config.max_blocks_per_seq), dtype=torch.long)
        for b, seq in enumerate(seqs):
            tables[b, : len(seq.block_table)] = torch.tensor(seq.block_table)
        slots = torch.tensor([slot_for(s.block_table, len(s) - 1, bs) for s in seqs])
        return self.model.decode(tokens, positions, self.cache, tables, positions + 1, slots)
