"""The training loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cross_entropy(logits: jax.Array, labels: jax.Array, label_smoothing: float = 0.0) -> jax.Array:
    """Mean cross entropy with label smoothing (targets `(1-s)*onehot + s/n_classes`).

    Args:
        logits: `[batch, n_classes]`; labels: `[batch]` class indices.
    """
    n_classes = logits.shape[-1]
    targets = jax.nn.one_hot(labels, n_classes) * (1.0 - label_smoothing) + label_smoothing / n_classes
    per_example = -jnp.sum(targets * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    return jnp.mean(per_example)
