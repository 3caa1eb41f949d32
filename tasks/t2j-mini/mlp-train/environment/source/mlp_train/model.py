"""The MLP classifier: blocks of Linear -> LayerNorm -> GELU -> Dropout, then a linear head."""

from __future__ import annotations

import torch
from torch import nn

from mlp_train.config import ModelConfig


class MLPBlock(nn.Module):
    """One hidden block: `[batch, d_in] -> [batch, d_out]`."""

    def __init__(self, d_in: int, d_out: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.norm = nn.LayerNorm(d_out, eps=eps)
        self.act = nn.GELU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.act(self.norm(self.linear(x))))


class MLPClassifier(nn.Module):
    """`[batch, in_dim]` features -> `[batch, n_classes]` logits."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dims = (cfg.in_dim, *cfg.hidden_dims)
        self.blocks = nn.ModuleList(
            MLPBlock(d_in, d_out, cfg.dropout, cfg.norm_eps) for d_in, d_out in zip(dims[:-1], dims[1:])
        )
        self.head = nn.Linear(dims[-1], cfg.n_classes)

    def hidden_states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The output of every block, in order."""
        states = []
        for block in self.blocks:
            x = block(x)
            states.append(x)
        return states

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)
