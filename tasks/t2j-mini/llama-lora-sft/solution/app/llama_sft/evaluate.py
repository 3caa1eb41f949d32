"""Held-out validation loss."""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from llama_sft.config import ModelConfig
from llama_sft.data import IGNORE_INDEX, Encoded, collate
from llama_sft.loss import token_nll
from llama_sft.modeling.llama import forward


@partial(jax.jit, static_argnames=("cfg", "scale"))
def _batch_nll(params, lora, input_ids, labels, cfg: ModelConfig, scale: float):
    return token_nll(forward(params, lora, input_ids, cfg, scale), labels)


def validation_loss(
    params: dict,
    lora: dict | None,
    encoded: list[Encoded],
    cfg: ModelConfig,
    scale: float,
    max_seq_len: int,
    pad_id: int,
    batch_size: int,
) -> float:
    """Token-weighted mean next-token loss over all response tokens of `encoded`."""
    total, count = 0.0, 0
    for start in range(0, len(encoded), batch_size):
        chunk = list(encoded[start : start + batch_size])
        # Pad the last batch with fully ignored rows so every batch has one shape.
        chunk += [([pad_id], [IGNORE_INDEX])] * (batch_size - len(chunk))
        batch = collate(chunk, max_seq_len, pad_id)
        s, c = _batch_nll(params, lora, batch["input_ids"], batch["labels"], cfg, scale)
        total += float(np.asarray(s, dtype=np.float64))
        count += int(c)
    return total / max(count, 1)
