"""Record the frozen references of the mlp-train grader from the PyTorch original.

Task authors run this (with torch) after any change to the original or its assets:

    python tests/record_refs.py

It writes `tests/inputs.npz` (the fixed inputs the grader feeds the candidate),
`tests/refs/refs.npz` (the original's outputs on them) and `tests/refs/meta.json`
(versions that recorded them, the original's end-to-end wall time, and the bands of
the held-out checks, measured as the original's own spread over dropout seeds).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
TASK = TESTS.parent
SOURCE = TASK / "environment" / "source"
ASSETS = TASK / "environment" / "assets"
TRAJECTORY_STEPS = 25
BAND_SEEDS = range(8)
TAIL = 20  # training-loss window compared at the end-to-end level
WALL_REPEATS = 3
HIDDEN_INPUTS = ("1", "33", "tiny", "large")
LOGIT_INPUTS = ("1", "8", "64", "tiny", "large")


def make_inputs() -> dict[str, np.ndarray]:
    """Fixed, framework-independent inputs (already in the normalized feature space)."""
    rng = np.random.default_rng(1234)
    inputs = {f"x_{n}": rng.normal(size=(n, 16)).astype(np.float32) for n in (1, 8, 33, 64)}
    # regimes where small numerical slips show: near-constant features (LayerNorm's epsilon
    # matters) and large activations (GELU's tails)
    inputs["x_tiny"] = (1e-3 * rng.normal(size=(16, 16))).astype(np.float32)
    inputs["x_large"] = (6.0 * rng.normal(size=(16, 16))).astype(np.float32)
    inputs["ce_logits"] = (3.0 * rng.normal(size=(16, 4))).astype(np.float32)
    inputs["ce_labels"] = rng.integers(0, 4, size=16).astype(np.int64)
    inputs["grad_x"] = rng.normal(size=(32, 16)).astype(np.float32)
    inputs["grad_y"] = rng.integers(0, 4, size=32).astype(np.int64)
    return inputs


def record(inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:
    sys.path.insert(0, str(SOURCE))
    import torch
    from safetensors.numpy import load_file

    from mlp_train import data, losses, optim, train
    from mlp_train.checkpoint import load_checkpoint
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.evaluate import evaluate
    from mlp_train.model import MLPClassifier

    torch.set_num_threads(1)
    refs: dict[str, np.ndarray] = {}
    mcfg, tcfg = ModelConfig(), TrainConfig()
    raw = load_file(str(ASSETS / "init.safetensors"))
    for key, value in raw.items():
        refs[f"sd/{key}"] = value

    train_ds, val_ds, norm = data.prepare_data(ASSETS / "dataset.npz", tcfg)
    refs.update({"data/train_x": train_ds.x, "data/train_y": train_ds.y, "data/val_x": val_ds.x,
                 "data/val_y": val_ds.y, "data/mean": norm.mean, "data/std": norm.std})
    for epoch in (0, 1):
        batches = list(data.iterate_batches(train_ds, tcfg.batch_size, tcfg.data_seed, epoch))
        refs[f"data/batches_e{epoch}"] = np.concatenate([y for _, y in batches])
    refs["data/first_batch_x"] = next(data.batch_stream(train_ds, tcfg.batch_size, tcfg.data_seed))[0]
    refs["schedule/lr"] = np.array([optim.lr_at(s, tcfg) for s in range(tcfg.total_steps + 5)])

    model = load_checkpoint(MLPClassifier(mcfg), ASSETS / "init.safetensors").eval()
    with torch.no_grad():
        for n in HIDDEN_INPUTS:
            for i, h in enumerate(model.hidden_states(torch.from_numpy(inputs[f"x_{n}"]))):
                refs[f"hidden/{n}/{i}"] = h.numpy()
        for n in LOGIT_INPUTS:
            refs[f"logits/{n}"] = model(torch.from_numpy(inputs[f"x_{n}"])).numpy()
        for s in (0.0, 0.1):
            ce = losses.cross_entropy(torch.from_numpy(inputs["ce_logits"]), torch.from_numpy(inputs["ce_labels"]), s)
            refs[f"ce/{s}"] = np.array(ce.item())
    model.zero_grad()
    loss = losses.cross_entropy(model(torch.from_numpy(inputs["grad_x"])), torch.from_numpy(inputs["grad_y"]),
                                tcfg.label_smoothing)
    loss.backward()
    refs["grad/loss"] = np.array(loss.item())
    for name, param in model.named_parameters():
        refs[f"grad/{name}"] = param.grad.numpy().copy()
    ev = evaluate(model, val_ds)
    refs["eval/loss"], refs["eval/accuracy"] = np.array(ev["loss"]), np.array(ev["accuracy"])

    with tempfile.TemporaryDirectory() as tmp:
        m = train.train(ASSETS / "dataset.npz", ASSETS / "init.safetensors", tmp,
                        dataclasses.replace(mcfg, dropout=0.0), tcfg, max_steps=TRAJECTORY_STEPS)
        refs["traj/loss"], refs["traj/lr"] = np.array(m["train_loss"]), np.array(m["lr"])
        for key, value in load_file(str(Path(tmp) / "final.safetensors")).items():
            refs[f"traj/final/{key}"] = value
        runs = []
        for seed in BAND_SEEDS:
            m = train.train(ASSETS / "dataset.npz", ASSETS / "init.safetensors", Path(tmp) / str(seed),
                            mcfg, dataclasses.replace(tcfg, seed=seed))
            runs.append({"seed": seed, "val_loss": m["val_loss"], "val_accuracy": m["val_accuracy"],
                         "train_tail": float(np.mean(m["train_loss"][-TAIL:]))})
        final_keys = load_file(str(Path(tmp) / "0" / "final.safetensors"))
        for key, value in final_keys.items():
            refs[f"e2e/shape/{key}"] = np.array(value.shape)
        walls = []
        for _ in range(WALL_REPEATS):  # the fastest run: least disturbed by other load on the machine
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "mlp_train.train", "--data", str(ASSETS / "dataset.npz"),
                            "--init", str(ASSETS / "init.safetensors"), "--out", str(Path(tmp) / "cli")],
                           cwd=SOURCE, check=True, capture_output=True)
            walls.append(time.monotonic() - started)
        cli_wall_s = min(walls)

    held_out = {}
    for name in ("val_loss", "val_accuracy", "train_tail"):
        values = np.array([r[name] for r in runs])
        held_out[name] = {"reference": float(values.mean()), "band": float(np.max(np.abs(values - values.mean())))}
    meta = {
        "recorded_with": {"python": platform.python_version(), "torch": torch.__version__,
                          "numpy": np.__version__, "platform": platform.platform(), "device": "cpu",
                          "precision": "float32", "threads": 1},
        "reference_wall_s": cli_wall_s,
        "reference_wall_runs_s": walls,
        "trajectory_steps": TRAJECTORY_STEPS,
        "tail": TAIL,
        "hidden_inputs": HIDDEN_INPUTS,
        "logit_inputs": LOGIT_INPUTS,
        "held_out": held_out,
        "seed_runs": runs,
    }
    return refs, meta


def main() -> None:
    inputs = make_inputs()
    refs, meta = record(inputs)
    np.savez(TESTS / "inputs.npz", **inputs)
    (TESTS / "refs").mkdir(exist_ok=True)
    np.savez(TESTS / "refs" / "refs.npz", **refs)
    (TESTS / "refs" / "meta.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps({"reference_wall_s": meta["reference_wall_s"], "held_out": meta["held_out"]}, indent=2))


if __name__ == "__main__":
    main()
