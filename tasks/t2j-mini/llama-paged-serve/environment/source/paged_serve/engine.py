"""The engine API: add requests, step, collect finished outputs."""

from __future__ import annotations

from pathlib import Path

import torch

from paged_serve.checkpoint import load_model
from paged_serve.config import EngineConfig, ModelConfig
from paged_serve.model import LlamaForCausalLM
from paged_serve.model_runner import ModelRunner
from paged_serve.sampler import Sampler, SamplingParams
from paged_serve.scheduler import Scheduler
from paged_serve.sequence import RequestOutput, Sequence
from paged_serve.tokenizer import ByteTokenizer


class LLMEngine:
    """Continuous batching over a paged KV cache."""

    def __init__(self, model: LlamaForCausalLM, config: ModelConfig, engine_config: EngineConfig | None = None):
        self.config = config
        self.engine_config = engine_config or EngineConfig()
        self.tokenizer = ByteTokenizer()
        self.runner = ModelRunner(model, config, self.engine_config)
        self.scheduler = Scheduler(self.engine_config, config.eos_token_id)
        self.sampler = Sampler()
        self._arrivals = 0

    @classmethod
    def from_pretrained(cls, assets_dir: str | Path, engine_config: EngineConfig | None = None) -> LLMEngine:
        model, config = load_model(assets_dir)
        return cls(model, config, engine_config)

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
        generator = None
        if sampling_params.seed is not None:
            generator = torch.Generator().manual_seed(sampling_params.seed)
        self.scheduler.add(
            Sequence(request_id, self._arrivals, prompt, ids, sampling_params, generator=generator)
        )
        self._arrivals += 1

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """Run one prefill or decode step; returns the requests that finished in it."""
        seqs, is_prefill = self.scheduler.schedule()
        if not seqs:
            return []
        logits = self.runner.prefill(seqs) if is_prefill else self.runner.decode(seqs)
        tokens = self.sampler(logits, [s.sampling_params for s in seqs], [s.generator for s in seqs])
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

    def _output(self, seq: Sequence) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            prompt=seq.prompt,
            prompt_token_ids=list(seq.prompt_token_ids),
            output_token_ids=list(seq.output_token_ids),
            text=self.tokenizer.decode(seq.output_token_ids),
            finish_reason=seq.finish_reason or "length",
        )
