"""LoRA adapters: a frozen base linear plus a trainable low-rank update scaled by alpha / rank."""

from __future__ import annotations

import math

import torch
from torch import nn

from llama_sft.config import LoraConfig


class LoRALinear(nn.Module):
    """y = base(x) + (x A^T) B^T * alpha / rank; A [rank, in], B [out, rank]; B starts at zero."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.rank = rank
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale


def _parent_of(block: nn.Module, name: str) -> nn.Module:
    return block.attn if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else block.mlp


def apply_lora(model: nn.Module, cfg: LoraConfig) -> None:
    """Wrap every target projection of every block (in layer order, then `cfg.targets` order)
    and freeze everything that is not a LoRA factor."""
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.layers:
        for name in cfg.targets:
            parent = _parent_of(block, name)
            setattr(parent, name, LoRALinear(getattr(parent, name), cfg.rank, cfg.alpha))


def lora_modules(model: nn.Module, cfg: LoraConfig) -> dict[str, LoRALinear]:
    """`layers.{i}.{target}` -> the LoRALinear there."""
    out = {}
    for i, block in enumerate(model.layers):
        for name in cfg.targets:
            out[f"layers.{i}.{name}"] = getattr(_parent_of(block, name), name)
    return out


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
