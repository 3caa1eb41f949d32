"""Allocation of KV-cache blocks to sequences."""

from __future__ import annotations

from collections import deque

from paged_serve.sequence import Sequence


class OutOfBlocks(RuntimeError):
    """The KV-cache pool has no free block left."""


def blocks_needed(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def slot_for(block_table: list[int], position: int, block_size: int) -> int:
    """Pool slot of the token at `position` of a sequence."""
    return block_table[position // block_size] * block_size + position % block_size


class BlockManager:
    """Hands out blocks from a free list; a sequence holds its blocks until it finishes."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def can_allocate(self, num_tokens: int, reserve: int = 0) -> bool:
        return blocks_needed(num_tokens, self.block_size) + reserve <= self.num_free

    def allocate(self, seq: Sequence) -> None:
        """Give a new sequence the blocks its prompt needs."""
        for _ in range(blocks_needed(len(seq.prompt_token_ids), self.block_size)):
            seq.block_table.append(self._take())

    def append_slot(self, seq: Sequence) -> None:
        """Make room for the last token of `seq` (the one the next decode step writes)."""
        position = len(seq) - 1
        if position % self.block_size == 0:
            seq.block_table.append(self._take())

    def free(self, seq: Sequence) -> None:
        self.free_blocks.extend(seq.block_table)
        seq.block_table = []

    def _take(self) -> int:
        if not self.free_blocks:
            raise OutOfBlocks("the KV cache has no free block; lower max_num_seqs or raise num_blocks")
        return self.free_blocks.popleft()
