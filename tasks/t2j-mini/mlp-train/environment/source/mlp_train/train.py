"""Training entry point: `python -m mlp_train.train --data D --init CKPT --out DIR`.

Writes `DIR/final.safetensors` and `DIR/metrics.json` with the per-step training
loss and learning rate, and the validation loss and accuracy after training.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from mlp_train.checkpoint import load_checkpoint, save_checkpoint
from mlp_train.config import ModelConfig, TrainConfig
from mlp_train.data import batch_stream, prepare_data
from mlp_train.evaluate import evaluate
from mlp_train.losses import cross_entropy
from mlp_train.model import MLPClassifier
from mlp_train.optim import build_optimizer


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
    torch.manual_seed(train_cfg.seed)
    train_ds, val_ds, _ = prepare_data(data_path, train_cfg)
    model = load_checkpoint(MLPClassifier(model_cfg), init_path)
    optimizer, scheduler = build_optimizer(model, train_cfg)
    stream = batch_stream(train_ds, train_cfg.batch_size, train_cfg.data_seed)
    steps = train_cfg.total_steps if max_steps is None else min(max_steps, train_cfg.total_steps)
    losses, lrs = [], []
    model.train()
    for _ in range(steps):
        x, y = next(stream)
        loss = cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y), train_cfg.label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    result = evaluate(model, val_ds)
    metrics = {"train_loss": losses, "lr": lrs, "val_loss": result["loss"], "val_accuracy": result["accuracy"]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out / "final.safetensors")
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
        args.data,
        args.init,
        args.out,
        ModelConfig(dropout=args.dropout),
        dataclasses.replace(TrainConfig(), seed=args.seed),
        max_steps=args.steps,
    )
    print(json.dumps({"val_loss": metrics["val_loss"], "val_accuracy": metrics["val_accuracy"]}))


if __name__ == "__main__":
    main()
