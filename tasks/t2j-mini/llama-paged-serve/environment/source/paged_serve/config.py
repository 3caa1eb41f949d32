"""Model and engine configuration."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-style decoder (RMSNorm, rotary embeddings, GQA, SwiGLU)."""

    vocab_size: int = 259
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 176
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 128
    pad_token_id: int = 256
    bos_token_id: int = 257
    eos_token_id: int = 258

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        """Read a Hugging Face style `config.json`."""
        raw = json.loads(Path(path).read_text())
        return cls(
            vocab_size=raw["vocab_size"],
            dim=raw["hidden_size"],
            n_layers=raw["num_hidden_layers"],
            n_heads=raw["num_attention_heads"],
            n_kv_heads=raw["num_key_value_heads"],
            hidden_dim=raw["intermediate_size"],
            norm_eps=raw["rms_norm_eps"],
            rope_theta=raw["rope_theta"],
            max_seq_len=raw["max_position_embeddings"],
            pad_token_id=raw["pad_token_id"],
            bos_token_id=raw["bos_token_id"],
            eos_token_id=raw["eos_token_id"],
        )


@dataclass(frozen=True)
class EngineConfig:
    """How the engine lays out its paged KV cache and batches requests."""

    block_size: int = 8
    num_blocks: int = 64
    max_num_seqs: int = 4
    max_model_len: int = 128

    @property
    def max_blocks_per_seq(self) -> int:
        return -(-self.max_model_len // self.block_size)
