"""Building blocks: RMSNorm, rotary position embeddings, SwiGLU feed-forward (pure functions)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.jit
def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    """Root-mean-square normalisation over the last axis, then a learned scale: [..., D] -> [..., D]."""
    x = jnp.asarray(x, jnp.float32)
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotary_cos_sin(positions: Array, head_dim: int, theta: float) -> tuple[Array, Array]:
    """cos/sin tables for integer `positions` (any shape) -> positions.shape + (head_dim,)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def rotate_half(x: Array) -> Array:
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


@jax.jit
def apply_rotary(x: Array, positions: Array, theta: float) -> Array:
    """Rotate query/key heads by their positions.

    Args:
        x: [..., N, H, D] queries or keys.
        positions: [..., N] integer positions of the N tokens.
        theta: rotary base.
    """
    x = jnp.asarray(x, jnp.float32)
    cos, sin = rotary_cos_sin(positions, x.shape[-1], theta)
    return x * cos[..., None, :] + rotate_half(x) * sin[..., None, :]


def swiglu(x: Array, w_gate: Array, w_up: Array, w_down: Array) -> Array:
    """x: [..., dim]; w_gate, w_up: [dim, hidden]; w_down: [hidden, dim]."""
    return (jax.nn.silu(x @ w_gate) * (x @ w_up)) @ w_down
