"""Held-out evaluation: plain (unsmoothed) cross entropy and accuracy."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mlp_train.config import ModelConfig
from mlp_train.data import Dataset
from mlp_train.losses import cross_entropy
from mlp_train.model import apply


def evaluate(params: Any, ds: Dataset, cfg: ModelConfig) -> dict[str, float]:
    """Mean loss and accuracy of the model on `ds`, in eval mode (no dropout)."""
    logits = apply(params, jnp.asarray(ds.x), cfg, train=False)
    labels = jnp.asarray(ds.y)
    loss, accuracy = jax.device_get(
        (cross_entropy(logits, labels), jnp.mean(jnp.argmax(logits, axis=-1) == labels))
    )
    return {"loss": float(loss), "accuracy": float(accuracy)}
