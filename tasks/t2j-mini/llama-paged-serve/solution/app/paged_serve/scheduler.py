"""Which sequences run in the next step: new prompts first (prefill), otherwise one decode step for all."""

from __future__ import annotations

from collections import deque

from paged_serve.block_manager import BlockManager
from paged_serve.config import EngineConfig
from paged_serve.sequence import Sequence, SequenceStatus


class Scheduler:
    """First come, first served; a step is either all-prefill or all-decode."""

    def __init__(self, engine_config: EngineConfig, eos_token_id: int):
        self.config = engine_config
        self.eos_token_id = eos_token_id
        self.block_manager = BlockManager(engine_config.num_blocks, engine_config.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> tuple[list[Sequence], bool]:
        """Returns the sequences of the next step and whether it is a prefill step."""
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) + len(admitted) < self.config.max_num_seqs:
            seq = self.waiting[0]
            # Keep one spare block per running sequence so decoding never runs dry.
            reserve = len(self.running) + len(admitted)
            if not self.block_manager.can_allocate(len(seq.prompt_token_ids), reserve):
                break
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            seq.status = SequenceStatus.RUNNING
            admitted.append(seq)
        if admitted:
            self.running.extend(admitted)
            return admitted, True
        for seq in self.running:
            self.block_manager.append_slot(seq)
        return list(self.running), False

    def postprocess(self, seqs: list[Sequence], tokens: list[int]) -> list[Sequence]:
        """Append the sampled tokens; returns the sequences that finished, in batch order."""
        finished = []
        for seq, token in zip(seqs, tokens):
            seq.output_token_ids.append(token)
            if not seq.sampling_params.ignore_eos and token == self.eos_token_id:
                seq.finish_reason = "stop"
            elif len(seq.output_token_ids) >= seq.sampling_params.max_tokens:
                seq.finish_reason = "length"
            if seq.finish_reason is not None:
                seq.status = SequenceStatus.FINISHED
                self.block_manager.free(seq)
                self.running.remove(seq)
                finished.append(seq)
        return finished
