"""Training entry point: `python -m mlp_train.train --data D --init CKPT --out DIR`.

Writes `DIR/final.safetensors` (original layout) and `DIR/metrics.json` with the
per-step training loss and learning rate, and the validation loss and accuracy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from mlp_train.checkpoint import load_checkpoint, save_checkpoint
from mlp_train.config import ModelConfig, TrainConfig
from mlp_train.data import batch_stream, prepare_data
from mlp_train.evaluate import evaluate
from mlp_train.losses import cross_entropy
from mlp_train.model import apply
from mlp_train.optim import lr_at, make_optimizer


def loss_fn(
    params: Any, x: jax.Array, y: jax.Array, model_cfg: ModelConfig, train_cfg: TrainConfig,
    *, train: bool = False, rng: jax.Array | None = None,
) -> jax.Array:
    """Label-smoothed training loss of one batch (`x: [batch, in_dim]`, `y: [batch]`)."""
    return cross_entropy(apply(params, x, model_cfg, train=train, rng=rng), y, train_cfg.label_smoothing)


def make_train_step(
    model_cfg: ModelConfig, train_cfg: TrainConfig, optimizer: optax.GradientTransformation
) -> Callable:
    """A jitted `(params, opt_state, x, y, rng) -> (params, opt_state, loss)`."""

    @jax.jit
    def step(params, opt_state, x, y, rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, model_cfg, train_cfg, train=True, rng=rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def train(
    data_path: str | Path,
    init_path: str | Path,
    out_dir: str | Path,
    model_cfg: ModelConfig | None = None,
    train_cfg: TrainConfig | None = None,
    max_steps: int | None = None,
) -> dict:
    """Train from the checkpoint at `init_path`; returns the metrics written to `out_dir`.

    Args:
        max_steps: stop after this many steps (the schedule still spans `total_steps`).
    """
    model_cfg = model_cfg or ModelConfig()
    train_cfg = train_cfg or TrainConfig()
    train_ds, val_ds, _ = prepare_data(data_path, train_cfg)
    params = load_checkpoint(init_path)
    optimizer = make_optimizer(train_cfg)
    opt_state = optimizer.init(params)
    step_fn = make_train_step(model_cfg, train_cfg, optimizer)
    stream = batch_stream(train_ds, train_cfg.batch_size, train_cfg.data_seed)
    key = jax.random.PRNGKey(train_cfg.seed)
    steps = train_cfg.total_steps if max_steps is None else min(max_steps, train_cfg.total_steps)
    losses, lrs = [], []
    for step in range(steps):
        x, y = next(stream)
        params, opt_state, loss = step_fn(params, opt_state, jnp.asarray(x), jnp.asarray(y), jax.random.fold_in(key, step))
        lrs.append(lr_at(step, train_cfg))
        losses.append(loss)
    result = evaluate(params, val_ds, model_cfg)
    metrics = {
        "train_loss": [float(v) for v in losses], "lr": lrs,
        "val_loss": result["loss"], "val_accuracy": result["accuracy"],
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(params, out / "final.safetensors")
    (out / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the MLP classifier.")
    parser.add_argument("--data", required=True, help="dataset.npz")
    parser.add_argument("--init", required=True, help="initial checkpoint (safetensors)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--seed", type=int, default=TrainConfig.seed, help="seed of dropout")
    parser.add_argument("--dropout", type=float, default=ModelConfig.dropout)
    args = parser.parse_args(argv)
    metrics = train(
        args.data, args.init, args.out,
        ModelConfig(dropout=args.dropout),
        dataclasses.replace(TrainConfig(), seed=args.seed),
        max_steps=args.steps,
    )
    print(json.dumps({"val_loss": metrics["val_loss"], "val_accuracy": metrics["val_accuracy"]}))


if __name__ == "__main__":
    main()
