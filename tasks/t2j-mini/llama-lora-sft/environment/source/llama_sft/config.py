"""Configuration of the model, the LoRA adapters and the training run."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the Llama-style decoder (read from the checkpoint's config.json)."""

    vocab_size: int = 264
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 176
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 128

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters on every linear projection of every block."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = (
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    )

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class TrainConfig:
    """Supervised fine-tuning hyper-parameters."""

    learning_rate: float = 2e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: int = 5
    total_steps: int = 60
    batch_size: int = 8
    max_seq_len: int = 64
    val_fraction: float = 0.1
    split_seed: int = 1234
    seed: int = 0
    lora_rank: int = 8
    lora_alpha: float = 16.0

    def lora(self) -> LoraConfig:
        return LoraConfig(rank=self.lora_rank, alpha=self.lora_alpha)


def _from_dict(cls, raw: dict):
    known = {f.name for f in fields(cls)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    return cls(**raw)


def load_model_config(path: str | Path) -> ModelConfig:
    """Read `config.json` next to the checkpoint."""
    return _from_dict(ModelConfig, json.loads(Path(path).read_text()))


def load_train_config(path: str | Path) -> TrainConfig:
    """Read a training configuration (JSON; missing keys take the defaults)."""
    return _from_dict(TrainConfig, json.loads(Path(path).read_text()))
