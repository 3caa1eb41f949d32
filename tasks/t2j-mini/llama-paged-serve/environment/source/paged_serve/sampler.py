"""Turning next-token logits into tokens.

The transforms run in a fixed order: temperature, then top-k, then top-p, then
sampling from the softmax with the request's own seeded generator. A request
with temperature 0 is decoded greedily.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded."""

    temperature: float = 1.0  # 0 means greedy
    top_k: int = -1  # <= 0 disables top-k
    top_p: float = 1.0  # 1.0 disables top-p
    max_tokens: int = 16
    seed: int | None = None  # seeds the request's own generator
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """logits: [B, V]; temperature: [B] (rows with 0 are left unscaled: they are decoded greedily)."""
    safe = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    return logits / safe[:, None]


def apply_top_k(logits: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Keep every logit at least as large as the k-th largest (ties at the k-th value are kept).

    top_k: [B]; k <= 0 or k >= V leaves the row unchanged.
    """
    vocab = logits.shape[-1]
    k = torch.where((top_k <= 0) | (top_k > vocab), torch.full_like(top_k, vocab), top_k)
    sorted_desc = logits.sort(dim=-1, descending=True).values
    kth = sorted_desc.gather(-1, (k - 1)[:, None].long())
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Nucleus filtering: drop the least likely tokens whose total mass is at most 1 - p.

    Tokens are sorted ascending with a stable sort; a token is dropped when the
    cumulative probability up to and including it is <= 1 - p. The most likely
    token is always kept.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=False, stable=True)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - top_p)[:, None]
    drop_sorted[:, -1] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def filtered_probs(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """The distribution a request samples from: [B, V] -> [B, V].

    Rows with temperature 0 become one-hot at the argmax.
    """
    logits = logits.float()
    filtered = apply_top_p(apply_top_k(apply_temperature(logits, temperature), top_k), top_p)
    probs = filtered.softmax(dim=-1)
    greedy = torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    return torch.where((temperature == 0)[:, None], greedy, probs)


class Sampler:
    """Samples one token per row, each row with its own generator."""

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32)
        top_k = torch.tensor([p.top_k for p in params], dtype=torch.long)
        top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32)
        probs = filtered_probs(logits, temperature, top_k, top_p)
        tokens = []
        for row, p, generator in zip(probs, params, generators):
            if p.greedy:
                tokens.append(int(row.argmax()))
            else:
                tokens.append(int(torch.multinomial(row, 1, generator=generator)))
        return tokens
