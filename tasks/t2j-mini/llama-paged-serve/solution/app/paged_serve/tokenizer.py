"""Byte-level tokenizer: ids 0..255 are bytes, then PAD, BOS, EOS."""

from __future__ import annotations

PAD_ID = 256
BOS_ID = 257
EOS_ID = 258


class ByteTokenizer:
    """UTF-8 bytes as tokens, with three special ids above the byte range."""

    vocab_size = 259
    pad_token_id = PAD_ID
    bos_token_id = BOS_ID
    eos_token_id = EOS_ID

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def decode(self, ids: list[int]) -> str:
        """Drop special ids and decode the bytes (invalid UTF-8 is replaced)."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
