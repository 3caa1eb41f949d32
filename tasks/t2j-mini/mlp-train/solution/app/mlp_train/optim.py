"""AdamW with linear warmup and cosine decay; no weight decay on biases and norm parameters."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

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


def schedule(cfg: TrainConfig) -> optax.Schedule:
    """`lr_at` as a traceable function of the optimizer's step count."""
    table = jnp.asarray([lr_at(s, cfg) for s in range(cfg.total_steps + 1)], dtype=jnp.float32)
    return lambda count: table[jnp.minimum(count, cfg.total_steps)]


def decay_mask(params: Any) -> Any:
    """True for linear kernels (2-D); biases and LayerNorm parameters do not decay."""
    return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW on the warmup + cosine schedule."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(
            schedule(cfg), b1=cfg.betas[0], b2=cfg.betas[1], eps=cfg.eps,
            weight_decay=cfg.weight_decay, mask=decay_mask,
        ),
    )
