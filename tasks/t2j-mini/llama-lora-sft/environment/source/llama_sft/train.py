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

import torch

from llama_sft.checkpoint import CONFIG_FILE, load_adapter, load_checkpoint, save_adapter
from llama_sft.config import TrainConfig, load_model_config, load_train_config
from llama_sft.data import batch_schedule, collate, encode_example, load_jsonl, split_train_val
from llama_sft.evaluate import validation_loss
from llama_sft.lora import apply_lora, trainable_parameters
from llama_sft.loss import sft_loss
from llama_sft.optim import build_optimizer
from llama_sft.tokenizer import ByteTokenizer


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
    model = load_checkpoint(checkpoint_dir, model_cfg)
    torch.manual_seed(cfg.seed)
    apply_lora(model, lora_cfg)
    if init_adapter is not None:
        load_adapter(model, lora_cfg, init_adapter)

    train_records, val_records = split_train_val(load_jsonl(data_path), cfg.val_fraction, cfg.split_seed)
    train_enc = [encode_example(tokenizer, r, cfg.max_seq_len) for r in train_records]
    val_enc = [encode_example(tokenizer, r, cfg.max_seq_len) for r in val_records]

    params = trainable_parameters(model)
    optimizer, scheduler = build_optimizer(params, cfg)
    metrics: dict = {"train_loss": [], "lr": [], "grad_norm": []}
    model.train()
    for indices in batch_schedule(len(train_enc), cfg.batch_size, cfg.total_steps, cfg.seed):
        batch = collate([train_enc[i] for i in indices], cfg.max_seq_len, tokenizer.pad_id)
        loss = sft_loss(model(batch["input_ids"]), batch["labels"])
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        metrics["lr"].append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics["train_loss"].append(loss.item())
        metrics["grad_norm"].append(float(grad_norm))

    metrics["val_loss"] = validation_loss(model, val_enc, cfg.max_seq_len, tokenizer.pad_id, cfg.batch_size)
    metrics["n_train"] = len(train_enc)
    metrics["n_val"] = len(val_enc)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_adapter(model, lora_cfg, out_dir / "adapter.safetensors")
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
