"""Checkpoints in the original's safetensors layout, converted without PyTorch.

The original stores `blocks.{i}.linear.weight` as `[out, in]`, `blocks.{i}.norm.weight`
/ `.bias`, and `head.weight` / `head.bias`; here linear kernels are `[in, out]` and the
LayerNorm weight is called `scale`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file, save_file

Params = dict[str, Any]


def _dense_from(sd: dict[str, np.ndarray], prefix: str) -> Params:
    return {"kernel": jnp.asarray(sd[f"{prefix}.weight"]).T, "bias": jnp.asarray(sd[f"{prefix}.bias"])}


def from_state_dict(sd: dict[str, np.ndarray]) -> Params:
    """Original state dict (numpy arrays) -> parameter pytree."""
    n_blocks = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    blocks = []
    for i in range(n_blocks):
        blocks.append({
            "linear": _dense_from(sd, f"blocks.{i}.linear"),
            "norm": {"scale": jnp.asarray(sd[f"blocks.{i}.norm.weight"]),
                     "bias": jnp.asarray(sd[f"blocks.{i}.norm.bias"])},
        })
    return {"blocks": blocks, "head": _dense_from(sd, "head")}


def to_state_dict(params: Params) -> dict[str, np.ndarray]:
    """Parameter pytree (or a pytree of gradients) -> original names and layouts (float32)."""
    sd: dict[str, np.ndarray] = {}
    for i, block in enumerate(params["blocks"]):
        sd[f"blocks.{i}.linear.weight"] = np.asarray(block["linear"]["kernel"]).T
        sd[f"blocks.{i}.linear.bias"] = np.asarray(block["linear"]["bias"])
        sd[f"blocks.{i}.norm.weight"] = np.asarray(block["norm"]["scale"])
        sd[f"blocks.{i}.norm.bias"] = np.asarray(block["norm"]["bias"])
    sd["head.weight"] = np.asarray(params["head"]["kernel"]).T
    sd["head.bias"] = np.asarray(params["head"]["bias"])
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def load_checkpoint(path: str | Path) -> Params:
    """Read an original-layout safetensors checkpoint."""
    return from_state_dict(load_file(str(path)))


def save_checkpoint(params: Params, path: str | Path) -> None:
    """Write `params` in the original layout, loadable by the PyTorch package."""
    save_file(to_state_dict(params), str(path))
