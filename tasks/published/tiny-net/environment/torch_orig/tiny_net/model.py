"""The model, its checkpoint loader and its loss."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from torch import nn

IN_FEATURES, HIDDEN, OUT_FEATURES = 6, 16, 3


class TinyNet(nn.Module):
    """x [batch, 6] -> y [batch, 3]: Linear, LayerNorm (eps 1e-5), tanh, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN_FEATURES, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.out = nn.Linear(HIDDEN, OUT_FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.norm(self.inp(x))))


def load_model(path: str) -> TinyNet:
    """The model with the weights of a safetensors checkpoint (PyTorch names and layouts)."""
    model = TinyNet()
    model.load_state_dict(load_file(path))
    return model.eval()


def mse_loss(model: TinyNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the model's prediction, averaged over batch and outputs."""
    return ((model(x) - y) ** 2).mean()
