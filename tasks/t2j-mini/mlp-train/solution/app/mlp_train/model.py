"""The MLP classifier as pure functions over an explicit parameter pytree.

Params = {"blocks": [{"linear": {"kernel": [d_in, d_out], "bias": [d_out]},
                      "norm": {"scale": [d_out], "bias": [d_out]}}, ...],
          "head": {"kernel": [d_last, n_classes], "bias": [n_classes]}}
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlp_train.config import ModelConfig

Params = dict[str, Any]


def init_params(cfg: ModelConfig, key: jax.Array) -> Params:
    """Random parameters drawn like `torch.nn.Linear` (uniform in ±1/sqrt(fan_in))."""
    dims = (cfg.in_dim, *cfg.hidden_dims)
    keys = jax.random.split(key, 2 * len(dims))

    def dense(k1: jax.Array, k2: jax.Array, d_in: int, d_out: int) -> Params:
        bound = 1.0 / np.sqrt(d_in)
        return {
            "kernel": jax.random.uniform(k1, (d_in, d_out), minval=-bound, maxval=bound),
            "bias": jax.random.uniform(k2, (d_out,), minval=-bound, maxval=bound),
        }

    blocks = [
        {"linear": dense(keys[2 * i], keys[2 * i + 1], d_in, d_out),
         "norm": {"scale": jnp.ones(d_out), "bias": jnp.zeros(d_out)}}
        for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:]))
    ]
    return {"blocks": blocks, "head": dense(keys[-2], keys[-1], dims[-1], cfg.n_classes)}


def dense_apply(p: Params, x: jax.Array) -> jax.Array:
    """`[batch, d_in] -> [batch, d_out]`."""
    return x @ p["kernel"] + p["bias"]


def layer_norm(p: Params, x: jax.Array, eps: float) -> jax.Array:
    """LayerNorm over the last axis (biased variance, as torch)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def dropout(x: jax.Array, rate: float, rng: jax.Array | None, deterministic: bool) -> jax.Array:
    """Inverted dropout; the identity when `deterministic` (eval) or `rate == 0`."""
    if deterministic or rate == 0.0:
        return x
    if rng is None:
        raise ValueError("dropout in training mode needs an rng key")
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def block_apply(
    p: Params, x: jax.Array, cfg: ModelConfig, *, train: bool = False, rng: jax.Array | None = None
) -> jax.Array:
    """One hidden block: Linear -> LayerNorm -> GELU (exact) -> Dropout."""
    h = jax.nn.gelu(layer_norm(p["norm"], dense_apply(p["linear"], x), cfg.norm_eps), approximate=False)
    return dropout(h, cfg.dropout, rng, deterministic=not train)


def _block_keys(n: int, train: bool, rng: jax.Array | None) -> list[jax.Array | None]:
    if not train or rng is None:
        return [None] * n
    return list(jax.random.split(rng, n))


def hidden_states(
    params: Params, x: jax.Array, cfg: ModelConfig, *, train: bool = False, rng: jax.Array | None = None
) -> list[jax.Array]:
    """The output of every block, in order (`[batch, hidden_dims[i]]`)."""
    states = []
    for p, key in zip(params["blocks"], _block_keys(len(params["blocks"]), train, rng)):
        x = block_apply(p, x, cfg, train=train, rng=key)
        states.append(x)
    return states


def apply(
    params: Params, x: jax.Array, cfg: ModelConfig, *, train: bool = False, rng: jax.Array | None = None
) -> jax.Array:
    """`[batch, in_dim]` features -> `[batch, n_classes]` logits."""
    h = hidden_states(params, x, cfg, train=train, rng=rng)[-1] if params["blocks"] else x
    return dense_apply(params["head"], h)
