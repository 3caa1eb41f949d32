"""Requests as the engine tracks them, and what it returns for each."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from paged_serve.sampler import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """One request: prompt, generated tokens, KV blocks and sampling seed."""

    request_id: str
    arrival: int
    prompt: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    output_token_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: str | None = None
    seed: int = 0  # the request's PRNG seed; step t samples with fold_in(PRNGKey(seed), t)

    def __len__(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def last_token_id(self) -> int:
        return (self.output_token_ids or self.prompt_token_ids)[-1]


@dataclass
class RequestOutput:
    """A finished request."""

    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS) or "length" (max_tokens)
