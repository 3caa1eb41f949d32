"""TinyNet as pure JAX functions: parameters are a dict in the original's names and layouts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from safetensors.numpy import load_file

Params = dict[str, jax.Array]
LN_EPS = 1e-5


def load_params(path: str) -> Params:
    """The checkpoint's tensors as jax arrays, keyed by the original's names (weights [out, in])."""
    return {name: jnp.asarray(value) for name, value in load_file(path).items()}


def _linear(params: Params, prefix: str, x: jax.Array) -> jax.Array:
    return x @ params[f"{prefix}.weight"].T + params[f"{prefix}.bias"]


def _layer_norm(params: Params, x: jax.Array) -> jax.Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + LN_EPS) * params["norm.weight"] + params["norm.bias"]


@jax.jit
def apply(params: Params, x: jax.Array) -> jax.Array:
    """x [batch, 6] -> y [batch, 3]."""
    return _linear(params, "out", jnp.tanh(_layer_norm(params, _linear(params, "inp", x))))


@jax.jit
def mse_loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error over batch and outputs."""
    return ((apply(params, x) - y) ** 2).mean()
