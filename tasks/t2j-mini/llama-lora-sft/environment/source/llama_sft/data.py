"""Dataset loading, the train/validation split, label masking and batching."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from llama_sft.template import prompt_ids, response_ids
from llama_sft.tokenizer import ByteTokenizer

IGNORE_INDEX = -100


def load_jsonl(path: str | Path) -> list[dict]:
    """Read prompt/response records, one JSON object per line."""
    records = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if not isinstance(rec.get("prompt"), str) or not isinstance(rec.get("response"), str):
            raise ValueError(f"{path}:{n}: each record needs string 'prompt' and 'response'")
        records.append(rec)
    return records


def stable_permutation(n: int, seed: int) -> list[int]:
    """A permutation of range(n) that depends only on (n, seed), not on any RNG library."""
    return sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())


def split_train_val(records: list[dict], val_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Shuffle with `stable_permutation` and hold out the first int(n * val_fraction) (at least one)."""
    order = stable_permutation(len(records), seed)
    n_val = max(1, int(len(records) * val_fraction))
    val = [records[i] for i in order[:n_val]]
    train = [records[i] for i in order[n_val:]]
    return train, val


def encode_example(tokenizer: ByteTokenizer, record: dict, max_seq_len: int) -> tuple[list[int], list[int]]:
    """Template one record; labels copy the ids with the prompt part set to IGNORE_INDEX.

    The sequence is truncated to `max_seq_len` tokens.
    """
    p = prompt_ids(tokenizer, record["prompt"])
    r = response_ids(tokenizer, record["response"])
    ids = (p + r)[:max_seq_len]
    labels = ([IGNORE_INDEX] * len(p) + r)[:max_seq_len]
    return ids, labels


def collate(encoded: list[tuple[list[int], list[int]]], max_seq_len: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch to `max_seq_len`: input_ids with pad_id, labels with IGNORE_INDEX."""
    input_ids = torch.full((len(encoded), max_seq_len), pad_id, dtype=torch.long)
    labels = torch.full((len(encoded), max_seq_len), IGNORE_INDEX, dtype=torch.long)
    for row, (ids, labs) in enumerate(encoded):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        labels[row, : len(labs)] = torch.tensor(labs, dtype=torch.long)
    return {"input_ids": input_ids, "labels": labels}


def batch_schedule(n_examples: int, batch_size: int, total_steps: int, seed: int) -> list[list[int]]:
    """Example indices of every training step: epoch e uses stable_permutation(n, seed + e),
    cut into full batches (the incomplete tail of an epoch is dropped)."""
    per_epoch = n_examples // batch_size
    if per_epoch == 0:
        raise ValueError(f"{n_examples} examples cannot fill one batch of {batch_size}")
    steps: list[list[int]] = []
    epoch = 0
    while len(steps) < total_steps:
        order = stable_permutation(n_examples, seed + epoch)
        for b in range(per_epoch):
            steps.append(order[b * batch_size : (b + 1) * batch_size])
            if len(steps) == total_steps:
                break
        epoch += 1
    return steps
