"""Turning next-token logits into tokens.

The transforms run in a fixed order: temperature, then top-k, then top-p, then
sampling from the softmax with the request's own PRNG key. A request with
temperature 0 is decoded greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

Array = jax.Array


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded."""

    temperature: float = 1.0  # 0 means greedy
    top_k: int = -1  # <= 0 disables top-k
    top_p: float = 1.0  # 1.0 disables top-p
    max_tokens: int = 16
    seed: int | None = None  # seeds the request's own PRNG key
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def apply_temperature(logits: Array, temperature: Array) -> Array:
    """logits: [B, V]; temperature: [B] (rows with 0 are left unscaled: they are decoded greedily)."""
    safe = jnp.where(temperature > 0, temperature, 1.0)
    return logits / safe[:, None]


def apply_top_k(logits: Array, top_k: Array) -> Array:
    """Keep every logit at least as large as the k-th largest (ties at the k-th value are kept).

    top_k: [B]; k <= 0 or k > V leaves the row unchanged.
    """
    vocab = logits.shape[-1]
    k = jnp.where((top_k <= 0) | (top_k > vocab), vocab, top_k)
    sorted_desc = -jnp.sort(-logits, axis=-1)
    kth = jnp.take_along_axis(sorted_desc, (k - 1)[:, None], axis=-1)
    return jnp.where(logits < kth, -jnp.inf, logits)


def apply_top_p(logits: Array, top_p: Array) -> Array:
    """Nucleus filtering: drop the least likely tokens whose total mass is at most 1 - p.

    Tokens are sorted ascending with a stable sort; a token is dropped when the
    cumulative probability up to and including it is <= 1 - p. The most likely
    token is always kept.
    """
    order = jnp.argsort(logits, axis=-1, stable=True)
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
    cumulative = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
    drop_sorted = cumulative <= (1 - top_p)[:, None]
    drop_sorted = drop_sorted.at[:, -1].set(False)
    rows = jnp.arange(logits.shape[0])[:, None]
    drop = jnp.zeros_like(drop_sorted).at[rows, order].set(drop_sorted)
    return jnp.where(drop, -jnp.inf, logits)


@jax.jit
def filtered_probs(logits: Array, temperature: Array, top_k: Array, top_p: Array) -> Array:
    """The distribution a request samples from: [B, V] -> [B, V].

    Rows with temperature 0 become one-hot at the argmax.
    """
    logits = jnp.asarray(logits, jnp.float32)
    temperature = jnp.asarray(temperature, jnp.float32)
    filtered = apply_top_p(apply_top_k(apply_temperature(logits, temperature), top_k), top_p)
    probs = jax.nn.softmax(filtered, axis=-1)
    greedy = jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)
    return jnp.where((temperature == 0)[:, None], greedy, probs)


@jax.jit
def sample_tokens(
    logits: Array, temperature: Array, top_k: Array, top_p: Array, seeds: Array, steps: Array
) -> Array:
    """One token per row: [B, V] -> [B] int32.

    Row b draws with `fold_in(PRNGKey(seeds[b]), steps[b])`, so a request's
    tokens depend only on its own seed and how many tokens it has generated.
    """
    probs = filtered_probs(logits, temperature, top_k, top_p)
    keys = jax.vmap(lambda s, t: jax.random.fold_in(jax.random.PRNGKey(s), t))(seeds, steps)
    drawn = jax.vmap(lambda key, p: jax.random.categorical(key, jnp.log(p)))(keys, probs)
    return jnp.where(temperature == 0, jnp.argmax(logits, axis=-1), drawn).astype(jnp.int32)
