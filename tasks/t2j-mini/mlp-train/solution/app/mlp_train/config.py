"""Model and training settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the classifier."""

    in_dim: int = 16
    hidden_dims: tuple[int, ...] = (64, 64)
    n_classes: int = 4
    dropout: float = 0.1
    norm_eps: float = 1e-5


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer, schedule, loss and data settings."""

    lr: float = 3e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int = 10
    total_steps: int = 150
    min_lr_ratio: float = 0.1
    batch_size: int = 32
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    val_fraction: float = 0.2
    data_seed: int = 0
    seed: int = 0
