"""Turns a scheduled batch of sequences into fixed-shape model inputs and runs one step.

Batches are padded to `max_num_seqs` rows and prompts to a power-of-two width
(at least 32), so the jitted prefill/decode functions compile for a handful of
shapes only.
"""

from __future__ import annotations

import numpy as np

from paged_serve.block_manager import slot_for
from paged_serve.config import EngineConfig, ModelConfig
from paged_serve.kv_cache import init_cache
from paged_serve.model import Params, decode, prefill
from paged_serve.sequence import Sequence


class ModelRunner:
    """Holds the parameters and threads the KV cache through each step."""

    def __init__(self, params: Params, config: ModelConfig, engine_config: EngineConfig):
        self.params = params
        self.config = config
        self.engine_config = engine_config
        self.cache = init_cache(config, engine_config.num_blocks, engine_config.block_size)

    def prefill(self, seqs: list[Sequence]) -> np.ndarray:
        """Logits after each prompt's last token: [len(seqs), vocab]."""
        bs = self.engine_config.block_size
        rows = self.engine_config.max_num_seqs
        lengths = [len(s.prompt_token_ids) for s in seqs]
        width = max(32, 1 << (max(lengths) - 1).bit_length())
        tokens = np.full((rows, width), self.config.pad_token_id, np.int32)
        slots = np.full((rows, width), -1, np.int32)
        lengths_np = np.ones(rows, np.int32)
        for b, seq in enumerate(seqs):
            tokens[b, : lengths[b]] = seq.prompt_token_ids
            slots[b, : lengths[b]] = [slot_for(seq.block_table, p, bs) for p in range(lengths[b])]
            lengths_np[b] = lengths[b]
        logits, self.cache = prefill(self.params, self.config, self.cache, tokens, lengths_np, slots)
        logits = np.asarray(logits)
        return logits[np.arange(len(seqs)), lengths_np[: len(seqs)] - 1]

    def decode(self, seqs: list[Sequence]) -> np.ndarray:
        """Logits after each sequence's last token: [len(seqs), vocab]."""
        bs = self.engine_config.block_size
        rows = self.engine_config.max_num_seqs
        tokens = np.full(rows, self.config.pad_token_id, np.int32)
        positions = np.zeros(rows, np.int32)
        tables = np.zeros((rows, self.engine_config.max_blocks_per_seq), np.int32)
        slots = np.full(rows, -1, np.int32)
        for b, seq in enumerate(seqs):
            tokens[b] = seq.last_token_id
            positions[b] = len(seq) - 1
            tables[b, : len(seq.block_table)] = seq.block_table
            slots[b] = slot_for(seq.block_table, len(seq) - 1, bs)
        logits, self.cache = decode(
            self.params, self.config, self.cache, tokens, positions, tables, positions + 1, slots
        )
        return np.asarray(logits)[: len(seqs)]
