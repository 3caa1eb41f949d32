"""The data pipeline: load the bundled dataset, split it, normalize it, batch it.

Everything here is numpy, so the split and the batch order do not depend on the
training framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from mlp_train.config import TrainConfig

NORM_EPS = 1e-6


@dataclass
class Dataset:
    """Features `x: [n, in_dim]` (float32) and labels `y: [n]` (int64)."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Normalizer:
    """Per-feature statistics of the training split."""

    mean: np.ndarray
    std: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / (self.std + NORM_EPS)).astype(np.float32)


def load_dataset(path: str | Path) -> Dataset:
    """Read `dataset.npz` (arrays `x` and `y`)."""
    with np.load(path) as f:
        return Dataset(x=f["x"].astype(np.float32), y=f["y"].astype(np.int64))


def split_dataset(ds: Dataset, val_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """Split by a fixed permutation: the first `val_fraction` of it is the validation set."""
    n = len(ds)
    perm = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    return Dataset(ds.x[train_idx], ds.y[train_idx]), Dataset(ds.x[val_idx], ds.y[val_idx])


def fit_normalizer(x: np.ndarray) -> Normalizer:
    """Mean and (population) standard deviation of every feature."""
    return Normalizer(mean=x.mean(axis=0), std=x.std(axis=0))


def prepare_data(path: str | Path, cfg: TrainConfig) -> tuple[Dataset, Dataset, Normalizer]:
    """Load, split, and normalize both splits with the training split's statistics."""
    ds = load_dataset(path)
    train, val = split_dataset(ds, cfg.val_fraction, cfg.data_seed)
    norm = fit_normalizer(train.x)
    return Dataset(norm(train.x), train.y), Dataset(norm(val.x), val.y), norm


def iterate_batches(ds: Dataset, batch_size: int, seed: int, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One epoch of shuffled batches (a new permutation per epoch; the last partial batch is dropped)."""
    perm = np.random.default_rng((seed, epoch)).permutation(len(ds))
    for start in range(0, len(ds) - batch_size + 1, batch_size):
        idx = perm[start : start + batch_size]
        yield ds.x[idx], ds.y[idx]


def batch_stream(ds: Dataset, batch_size: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Batches forever, epoch after epoch."""
    epoch = 0
    while True:
        yield from iterate_batches(ds, batch_size, seed, epoch)
        epoch += 1
