"""AdamW over the LoRA factors with linear warmup then linear decay to zero."""

from __future__ import annotations

import torch

from llama_sft.config import TrainConfig


def lr_multiplier(step: int, warmup_steps: int, total_steps: int) -> float:
    """Factor applied to the base learning rate at optimizer step `step` (0-based)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def build_optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig):
    """AdamW (decoupled weight decay) and its LambdaLR schedule."""
    optimizer = torch.optim.AdamW(
        params,
        lr=cfg.learning_rate,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, cfg.warmup_steps, cfg.total_steps)
    )
    return optimizer, scheduler
