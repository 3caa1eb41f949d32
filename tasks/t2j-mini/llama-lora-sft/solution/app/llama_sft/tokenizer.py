"""Byte-level tokenizer: ids 0-255 are UTF-8 bytes, specials follow."""

from __future__ import annotations

SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|pad|>", "<|user|>", "<|assistant|>")


class ByteTokenizer:
    """Maps text to UTF-8 byte ids; special tokens are never produced by `encode`."""

    def __init__(self, vocab_size: int = 264) -> None:
        if vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size {vocab_size} leaves no room for the special tokens")
        self.vocab_size = vocab_size
        self.bos_id = 256
        self.eos_id = 257
        self.pad_id = 258
        self.user_id = 259
        self.assistant_id = 260
        self.special_ids = {name: 256 + i for i, name in enumerate(SPECIAL_TOKENS)}

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """Bytes are decoded (invalid sequences replaced); specials render as their names."""
        out: list[str] = []
        buf = bytearray()
        for i in ids:
            if i < 256:
                buf.append(i)
                continue
            if buf:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
            if 256 <= i < 256 + len(SPECIAL_TOKENS):
                out.append(SPECIAL_TOKENS[i - 256])
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
        return "".join(out)
