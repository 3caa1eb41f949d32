"""Held-out validation loss."""

from __future__ import annotations

import torch

from llama_sft.data import collate
from llama_sft.loss import token_nll


@torch.no_grad()
def validation_loss(model, encoded: list, max_seq_len: int, pad_id: int, batch_size: int) -> float:
    """Token-weighted mean next-token loss over all response tokens of `encoded`."""
    model.eval()
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for start in range(0, len(encoded), batch_size):
        batch = collate(encoded[start : start + batch_size], max_seq_len, pad_id)
        s, c = token_nll(model(batch["input_ids"]), batch["labels"])
        total += s.double()
        count += int(c)
    return float(total / max(count, 1))
