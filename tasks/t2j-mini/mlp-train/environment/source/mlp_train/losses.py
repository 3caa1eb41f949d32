"""The training loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross entropy with label smoothing (targets `(1-s)*onehot + s/n_classes`).

    Args:
        logits: `[batch, n_classes]`; labels: `[batch]` class indices.
    """
    return F.cross_entropy(logits, labels, label_smoothing=label_smoothing, reduction="mean")
