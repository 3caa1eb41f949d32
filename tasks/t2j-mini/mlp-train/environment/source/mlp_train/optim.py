"""AdamW with linear warmup and cosine decay; no weight decay on biases and norm parameters."""

from __future__ import annotations

import math

import torch
from torch import nn

from mlp_train.config import TrainConfig


def lr_multiplier(step: int, cfg: TrainConfig) -> float:
    """Factor on `cfg.lr` at optimizer step `step` (0-based)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.total_steps - cfg.warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate used by optimizer step `step`."""
    return cfg.lr * lr_multiplier(step, cfg)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weights of linear layers decay; biases and LayerNorm parameters do not."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        (decay if param.ndim >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the parameter groups and its warmup + cosine scheduler."""
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg))
    return optimizer, scheduler
