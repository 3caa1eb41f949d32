"""Shifted causal cross-entropy over response tokens only."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from llama_sft.data import IGNORE_INDEX


def token_nll(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sum of next-token negative log-likelihoods and the number of counted tokens.

    logits [B, T, V] at position t predict labels[:, t + 1]; labels equal to
    IGNORE_INDEX (prompt and padding) are not counted.
    """
    logits = logits[:, :-1].astype(jnp.float32)
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, jnp.maximum(targets, 0)[..., None], axis=-1)[..., 0]
    return jnp.sum(nll * mask), jnp.sum(mask)


def sft_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean next-token loss over the counted (response) tokens of the batch (a scalar)."""
    total, count = token_nll(logits, labels)
    return total / jnp.maximum(count, 1)
