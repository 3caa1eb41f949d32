"""AdamW over the LoRA factors with linear warmup then linear decay to zero.

The optimizer sees the whole training pytree {"base": ..., "lora": ...}; base
parameters are labelled frozen and receive no update at all (no weight decay either).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from llama_sft.config import TrainConfig


def lr_multiplier(step: int, warmup_steps: int, total_steps: int) -> float:
    """Factor applied to the base learning rate at optimizer step `step` (0-based)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def lr_schedule(cfg: TrainConfig) -> optax.Schedule:
    """The learning rate at optimizer step `count` (0-based), traceable under jit."""

    def schedule(count):
        count = jnp.asarray(count, jnp.float32)
        warm = count / max(1, cfg.warmup_steps)
        decay = jnp.maximum(0.0, (cfg.total_steps - count) / max(1, cfg.total_steps - cfg.warmup_steps))
        return cfg.learning_rate * jnp.where(count < cfg.warmup_steps, warm, decay)

    return schedule


def param_labels(params: dict) -> dict:
    """'trainable' for every LoRA factor, 'frozen' for every base parameter."""
    return {
        "base": jax.tree.map(lambda _: "frozen", params["base"]),
        "lora": jax.tree.map(lambda _: "trainable", params["lora"]),
    }


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW (decoupled weight decay) on the trainable partition."""
    adamw = optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.adamw(
            lr_schedule(cfg), b1=cfg.beta1, b2=cfg.beta2, eps=cfg.adam_eps, weight_decay=cfg.weight_decay
        ),
    )
    return optax.multi_transform({"trainable": adamw, "frozen": optax.set_to_zero()}, param_labels)
