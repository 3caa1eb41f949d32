"""Make litgpt-lora's assets from the original (litgpt 0.5.13, laid out by `twin task fetch`), with torch.

Run by task authors (never by the grader); the same seed gives the same files with the pinned torch:

    LITGPT_SOURCE=<the laid-out original> python environment/make_assets.py

Writes environment/assets/: model_config.yaml (a tiny Llama-family config: grouped-query
attention, RoPE, RMSNorm, SwiGLU MLP, saved by litgpt's own `save_config`), lit_model.pth (a
seeded random checkpoint in litgpt's own format: `torch.save` of `GPT(config).state_dict()`),
lora.yaml (the LoRA settings of the fine-tuning run) and finetune.npz (pre-tokenized
supervised fine-tuning data: `input_ids` and `labels`, the prompt and padding masked with -100).
Nothing is downloaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import yaml

ASSETS = Path(__file__).resolve().parent / "assets"
sys.path.insert(0, os.environ["LITGPT_SOURCE"])

import torch  # noqa: E402

from litgpt.config import Config  # noqa: E402
from litgpt.model import GPT  # noqa: E402
from litgpt.utils import save_config  # noqa: E402

SEED = 1234
MODEL = dict(
    name="tiny-llama", block_size=64, vocab_size=80, padded_vocab_size=96, n_layer=2, n_head=4, n_query_groups=2,
    n_embd=48, rotary_percentage=1.0, parallel_residual=False, bias=False, norm_class_name="RMSNorm",
    norm_eps=1e-5, mlp_class_name="LLaMAMLP", intermediate_size=96, rope_base=10000,
)  # fmt: skip
LORA = dict(lora_r=4, lora_alpha=16, lora_dropout=0.0, lora_query=True, lora_key=False, lora_value=True,
            lora_projection=True, lora_mlp=True, lora_head=True)  # fmt: skip
EXAMPLES, VAL_EXAMPLES, LENGTH = 32, 8, 24


def make_data(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt, response (a copy of the prompt reversed, so there is something to learn), EOS, padding."""
    ids = np.zeros((count, LENGTH), dtype=np.int64)
    labels = np.full((count, LENGTH), -100, dtype=np.int64)
    for row in range(count):
        prompt = rng.integers(3, MODEL["vocab_size"], size=int(rng.integers(4, 9)))
        response = np.concatenate([prompt[::-1], [2]])
        sequence = np.concatenate([[1], prompt, response])
        ids[row, : len(sequence)] = sequence
        labels[row, len(prompt) + 1 : len(sequence)] = response
    return ids, labels


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = Config(**MODEL)
    model = GPT(config)
    model.apply(model._init_weights)
    for name, param in model.named_parameters():  # RMSNorm weights away from 1, so a lost weight shows
        if "norm" in name or "ln_f" in name:
            param.data.uniform_(0.5, 1.5)
    save_config(config, ASSETS)
    torch.save(model.state_dict(), ASSETS / "lit_model.pth")
    (ASSETS / "lora.yaml").write_text(yaml.safe_dump(LORA, sort_keys=True))
    rng = np.random.default_rng(SEED)
    train_ids, train_labels = make_data(rng, EXAMPLES)
    val_ids, val_labels = make_data(rng, VAL_EXAMPLES)
    np.savez(ASSETS / "finetune.npz", train_input_ids=train_ids, train_labels=train_labels,
             val_input_ids=val_ids, val_labels=val_labels)  # fmt: skip


if __name__ == "__main__":
    main()
