"""Write the task's assets deterministically (numpy only): `assets/dataset.npz` and `assets/init.safetensors`.

The dataset is a synthetic 4-class problem in 16 features with very different scales
(so normalization matters). The checkpoint holds the classifier's initial weights
under the PyTorch state-dict names and layouts (`[out, in]` for linear weights),
drawn as `torch.nn.Linear` would draw them (uniform in ±1/sqrt(fan_in)).

Run: python environment/make_assets.py   (re-running rewrites identical files)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

ASSETS = Path(__file__).resolve().parent / "assets"
IN_DIM, HIDDEN, N_CLASSES, N = 16, (64, 64), 4, 1200


def make_dataset(rng: np.random.Generator) -> dict[str, np.ndarray]:
    y = rng.integers(0, N_CLASSES, size=N)
    centers = rng.normal(0.0, 1.0, size=(N_CLASSES, 6))
    latent = centers[y] + rng.normal(0.0, 0.9, size=(N, 6))
    mix = rng.normal(0.0, 1.0, size=(6, IN_DIM))
    x = np.tanh(latent @ mix / 2.0) + 0.3 * np.sin(latent @ rng.normal(0.0, 1.0, size=(6, IN_DIM)))
    x += rng.normal(0.0, 0.1, size=x.shape)
    scales = np.exp(rng.uniform(-2.0, 3.0, size=IN_DIM))
    offsets = rng.normal(0.0, 5.0, size=IN_DIM)
    flip = rng.random(N) < 0.05  # label noise
    y = np.where(flip, rng.integers(0, N_CLASSES, size=N), y)
    return {"x": (x * scales + offsets).astype(np.float32), "y": y.astype(np.int64)}


def make_checkpoint(rng: np.random.Generator) -> dict[str, np.ndarray]:
    state: dict[str, np.ndarray] = {}
    dims = (IN_DIM, *HIDDEN)
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
        bound = 1.0 / np.sqrt(d_in)
        state[f"blocks.{i}.linear.weight"] = rng.uniform(-bound, bound, (d_out, d_in))
        state[f"blocks.{i}.linear.bias"] = rng.uniform(-bound, bound, (d_out,))
        state[f"blocks.{i}.norm.weight"] = 1.0 + 0.1 * rng.normal(size=d_out)
        state[f"blocks.{i}.norm.bias"] = 0.1 * rng.normal(size=d_out)
    bound = 1.0 / np.sqrt(dims[-1])
    state["head.weight"] = rng.uniform(-bound, bound, (N_CLASSES, dims[-1]))
    state["head.bias"] = rng.uniform(-bound, bound, (N_CLASSES,))
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    np.savez(ASSETS / "dataset.npz", **make_dataset(np.random.default_rng(20260101)))
    save_file(make_checkpoint(np.random.default_rng(7)), str(ASSETS / "init.safetensors"))
    for path in ASSETS.iterdir():
        path.chmod(0o644)


if __name__ == "__main__":
    main()
