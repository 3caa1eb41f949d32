"""Held-out evaluation: plain (unsmoothed) cross entropy and accuracy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mlp_train.data import Dataset


@torch.no_grad()
def evaluate(model: nn.Module, ds: Dataset) -> dict[str, float]:
    """Mean loss and accuracy of `model` on `ds`, in eval mode."""
    model.eval()
    logits = model(torch.from_numpy(ds.x))
    labels = torch.from_numpy(ds.y)
    loss = F.cross_entropy(logits, labels).item()
    accuracy = (logits.argmax(dim=-1) == labels).float().mean().item()
    return {"loss": loss, "accuracy": accuracy}
