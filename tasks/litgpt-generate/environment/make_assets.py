"""Make litgpt-generate's assets from the original (litgpt 0.5.13, laid out by `twin task fetch`), with torch.

Run by task authors (never by the grader); the same seed gives the same files with the pinned torch:

    LITGPT_SOURCE=<the laid-out original> python environment/make_assets.py

Writes environment/assets/: model_config.yaml (a tiny Llama-family config: grouped-query
attention, RoPE, RMSNorm, SwiGLU MLP, saved by litgpt's own `save_config`) and lit_model.pth (a
seeded random checkpoint in litgpt's own format: `torch.save` of `GPT(config).state_dict()`).
The weights are drawn wider than litgpt's training init (0.02), so that next-token logits are
spread out and greedy decoding has clear winners. Nothing is downloaded.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
sys.path.insert(0, os.environ["LITGPT_SOURCE"])

import torch  # noqa: E402

from litgpt.config import Config  # noqa: E402
from litgpt.model import GPT  # noqa: E402
from litgpt.utils import save_config  # noqa: E402

SEED = 4321
MODEL = dict(
    name="tiny-llama-generate", block_size=64, vocab_size=100, padded_vocab_size=128, n_layer=3, n_head=4,
    n_query_groups=2, n_embd=64, rotary_percentage=1.0, parallel_residual=False, bias=False,
    norm_class_name="RMSNorm", norm_eps=1e-5, mlp_class_name="LLaMAMLP", intermediate_size=160, rope_base=10000,
)  # fmt: skip


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = Config(**MODEL)
    model = GPT(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or "ln_f" in name:  # away from 1, so a lost norm weight shows
                param.uniform_(0.5, 1.5)
            elif name == "transformer.wte.weight":
                param.normal_(0.0, 1.0)
            elif name == "lm_head.weight":
                param.normal_(0.0, 2.5 / math.sqrt(param.shape[1]))
            else:  # every other linear: [out, in], unit gain
                param.normal_(0.0, 1.0 / math.sqrt(param.shape[1]))
    save_config(config, ASSETS)
    torch.save(model.state_dict(), ASSETS / "lit_model.pth")


if __name__ == "__main__":
    main()
