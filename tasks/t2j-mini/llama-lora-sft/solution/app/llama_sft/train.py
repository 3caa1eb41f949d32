"""Training entry point: LoRA SFT of the raw checkpoint on a prompt/response JSONL file.

    python -m llama_sft.train --checkpoint-dir ASSETS --data ASSETS/sft_data.jsonl \
        --config configs/sft_tiny.json --out OUT [--init-adapter FILE] [--seed N]

Writes OUT/adapter.safetensors and OUT/metrics.json:
{"train_loss": [...], "lr": [...], "grad_norm": [...], "val_loss": x, "n_train": n, "n_val": n}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from llama_sft.checkpoint import CONFIG_FILE, load_adapter, load_checkpoint, save_adapter
from llama_sft.config import ModelConfig, TrainConfig, load_model_config, load_train_config
from llama_sft.data import batch_schedule, collate, encode_example, load_jsonl, split_train_val
from llama_sft.evaluate import validation_loss
from llama_sft.lora import init_lora
from llama_sft.loss import sft_loss
from llama_sft.modeling.llama import forward
from llama_sft.optim import lr_schedule, make_optimizer
from llama_sft.tokenizer import ByteTokenizer


class TrainState(NamedTuple):
    """step: optimizer steps taken; params: {"base": frozen, "lora": trainable}."""

    step: jax.Array
    params: dict
    opt_state: Any


def create_train_state(base: dict, lora: dict, cfg: TrainConfig) -> TrainState:
    params = {"base": base, "lora": lora}
    return TrainState(jnp.zeros((), jnp.int32), params, make_optimizer(cfg).init(params))


def make_train_step(model_cfg: ModelConfig, cfg: TrainConfig) -> Callable:
    """A jitted `step(state, batch) -> (state, {"loss", "grad_norm", "lr"})`.

    batch: {"input_ids": [B, T] int, "labels": [B, T] int}. grad_norm is the global
    norm of the LoRA gradients before clipping; lr the rate used by this step.
    """
    optimizer = make_optimizer(cfg)
    schedule = lr_schedule(cfg)
    scale = cfg.lora().scale

    def loss_fn(lora, base, batch):
        return sft_loss(forward(base, lora, batch["input_ids"], model_cfg, scale), batch["labels"])

    @jax.jit
    def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        base = state.params["base"]
        loss, lora_grads = jax.value_and_grad(loss_fn)(state.params["lora"], base, batch)
        grads = {"base": jax.tree.map(jnp.zeros_like, base), "lora": lora_grads}
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, "grad_norm": optax.global_norm(lora_grads), "lr": schedule(state.step)}
        return TrainState(state.step + 1, params, opt_state), metrics

    return step


def train(
    checkpoint_dir: Path,
    data_path: Path,
    cfg: TrainConfig,
    out_dir: Path,
    init_adapter: Path | None = None,
) -> dict:
    model_cfg = load_model_config(Path(checkpoint_dir) / CONFIG_FILE)
    lora_cfg = cfg.lora()
    tokenizer = ByteTokenizer(model_cfg.vocab_size)
    base = load_checkpoint(checkpoint_dir, model_cfg)
    if init_adapter is not None:
        lora = load_adapter(init_adapter, model_cfg, lora_cfg)
    else:
        lora = init_lora(jax.random.key(cfg.seed), model_cfg, lora_cfg)

    train_records, val_records = split_train_val(load_jsonl(data_path), cfg.val_fraction, cfg.split_seed)
    train_enc = [encode_example(tokenizer, r, cfg.max_seq_len) for r in train_records]
    val_enc = [encode_example(tokenizer, r, cfg.max_seq_len) for r in val_records]

    state = create_train_state(base, lora, cfg)
    step = make_train_step(model_cfg, cfg)
    history = []
    for indices in batch_schedule(len(train_enc), cfg.batch_size, cfg.total_steps, cfg.seed):
        batch = collate([train_enc[i] for i in indices], cfg.max_seq_len, tokenizer.pad_id)
        state, step_metrics = step(state, batch)
        history.append(step_metrics)
    history = jax.device_get(history)
    metrics: dict = {
        "train_loss": [float(m["loss"]) for m in history],
        "lr": [float(m["lr"]) for m in history],
        "grad_norm": [float(m["grad_norm"]) for m in history],
    }
    lora = state.params["lora"]
    metrics["val_loss"] = validation_loss(
        base, lora, val_enc, model_cfg, lora_cfg.scale, cfg.max_seq_len, tokenizer.pad_id, cfg.batch_size
    )
    metrics["n_train"] = len(train_enc)
    metrics["n_val"] = len(val_enc)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_adapter(lora, out_dir / "adapter.safetensors")
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--init-adapter", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    cfg = load_train_config(args.config) if args.config else TrainConfig()
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    start = time.perf_counter()
    metrics = train(args.checkpoint_dir, args.data, cfg, args.out, args.init_adapter)
    print(json.dumps({"val_loss": metrics["val_loss"], "wall_s": time.perf_counter() - start}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
