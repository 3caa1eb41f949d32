"""Shifted causal cross-entropy over response tokens only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from llama_sft.data import IGNORE_INDEX


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of next-token negative log-likelihoods and the number of counted tokens.

    logits [B, T, V] at position t predict labels[:, t + 1]; labels equal to
    IGNORE_INDEX (prompt and padding) are not counted.
    """
    logits = logits[:, :-1].float()
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    nll = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.clamp(min=0).reshape(-1), reduction="none"
    ).view_as(targets)
    return (nll * mask).sum(), mask.sum()


def sft_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss over the counted (response) tokens of the batch."""
    total, count = token_nll(logits, labels)
    return total / count.clamp(min=1)
