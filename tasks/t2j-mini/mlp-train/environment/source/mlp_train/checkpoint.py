"""Checkpoints in safetensors, keyed by the model's state-dict names."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, save_file
from torch import nn


def save_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Write every parameter (contiguous float32) to `path`."""
    state = {k: v.detach().contiguous().float() for k, v in model.state_dict().items()}
    save_file(state, str(path))


def load_checkpoint(model: nn.Module, path: str | Path) -> nn.Module:
    """Load `path` into `model` (every key must match)."""
    model.load_state_dict(load_file(str(path)), strict=True)
    return model
