"""The engine API: add requests, step, collect finished outputs."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np

from paged_serve.checkpoint import load_model
from paged_serve.config import EngineConfig, ModelConfig
from paged_serve.model import Params
from paged_serve.model_runner import ModelRunner
from paged_serve.sampler import SamplingParams, sample_tokens
from paged_serve.scheduler import Scheduler
from paged_serve.sequence import RequestOutput, Sequence
from paged_serve.tokenizer import ByteTokenizer


class LLMEngine:
    """Continuous batching over a paged KV cache."""

    def __init__(self, params: Params, config: ModelConfig, engine_config: EngineConfig | None = None):
        self.config = config
        self.engine_config = engine_config or EngineConfig()
        self.tokenizer = ByteTokenizer()
        self.runner = ModelRunner(params, config, self.engine_config)
        self.scheduler = Scheduler(self.engine_config, config.eos_token_id)
        self._arrivals = 0
        # Requests without a seed draw from a per-engine random base, like an unseeded generator.
        self._seed_base = secrets.randbits(30)

    @classmethod
    def from_pretrained(cls, assets_dir: str | Path, engine_config: EngineConfig | None = None) -> LLMEngine:
        params, config = load_model(assets_dir)
        return cls(params, config, engine_config)

    def add_request(self, request_id: str, prompt: str, sampling_params: SamplingParams) -> None:
        """Queue a request; its prompt is encoded with a leading BOS.

        Raises:
            ValueError: the prompt plus `max_tokens` does not fit in `max_model_len`.
        """
        ids = self.tokenizer.encode(prompt)
        if len(ids) + sampling_params.max_tokens > self.engine_config.max_model_len:
            raise ValueError(
                f"request {request_id}: {len(ids)} prompt tokens + {sampling_params.max_tokens} "
                f"new tokens exceed max_model_len={self.engine_config.max_model_len}"
            )
        seed = sampling_params.seed
        if seed is None:
            seed = (self._seed_base + self._arrivals) % (2**31)
        self.scheduler.add(Sequence(request_id, self._arrivals, prompt, ids, sampling_params, seed=seed))
        self._arrivals += 1

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """Run one prefill or decode step; returns the requests that finished in it."""
        seqs, is_prefill = self.scheduler.schedule()
        if not seqs:
            return []
        logits = self.runner.prefill(seqs) if is_prefill else self.runner.decode(seqs)
        tokens = self._sample(logits, seqs)
        return [self._output(s) for s in self.scheduler.postprocess(seqs, tokens)]

    def generate(
        self, prompts: list[str], sampling_params: SamplingParams | list[SamplingParams]
    ) -> list[RequestOutput]:
        """Serve `prompts` to completion; outputs come back in the order of `prompts`."""
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        order: dict[str, int] = {}
        for i, (prompt, params) in enumerate(zip(prompts, sampling_params, strict=True)):
            request_id = f"gen-{self._arrivals}"
            order[request_id] = i
            self.add_request(request_id, prompt, params)
        finished: list[RequestOutput] = []
        while self.has_unfinished_requests():
            finished.extend(self.step())
        mine = [out for out in finished if out.request_id in order]
        return sorted(mine, key=lambda out: order[out.request_id])

    def _sample(self, logits: np.ndarray, seqs: list[Sequence]) -> list[int]:
        """Sample with fixed-size arrays (padded to max_num_seqs rows) so the sampler compiles once."""
        params = [s.sampling_params for s in seqs]
        if all(p.greedy for p in params):  # greedy batches need no sampler at all
            return [int(t) for t in np.argmax(logits, axis=-1)]
        rows = self.engine_config.max_num_seqs
        pad = rows - len(seqs)
        full_logits = np.zeros((rows, logits.shape[-1]), np.float32)
        full_logits[: len(seqs)] = logits
        tokens = sample_tokens(
            full_logits,
            np.array([p.temperature for p in params] + [0.0] * pad, np.float32),
            np.array([p.top_k for p in params] + [-1] * pad, np.int32),
            np.array([p.top_p for p in params] + [1.0] * pad, np.float32),
            np.array([s.seed for s in seqs] + [0] * pad, np.uint32),
            np.array([len(s.output_token_ids) for s in seqs] + [0] * pad, np.int32),
        )
        return [int(t) for t in np.asarray(tokens)[: len(seqs)]]

    def _output(self, seq: Sequence) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            prompt=seq.prompt,
            prompt_token_ids=list(seq.prompt_token_ids),
            output_token_ids=list(seq.output_token_ids),
            text=self.tokenizer.decode(seq.output_token_ids),
            finish_reason=seq.finish_reason or "length",
        )
