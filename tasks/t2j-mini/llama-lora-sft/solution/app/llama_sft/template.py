"""The chat template used for supervised fine-tuning.

    <|bos|><|user|>\n{prompt}\n<|assistant|>\n{response}<|eos|>

The prompt part (everything up to and including the newline after
`<|assistant|>`) is masked out of the loss; the response and `<|eos|>` are learned.
Prompt and response are stripped of surrounding whitespace first.
"""

from __future__ import annotations

from llama_sft.tokenizer import ByteTokenizer


def prompt_ids(tokenizer: ByteTokenizer, prompt: str) -> list[int]:
    """Token ids of the prompt part of the template."""
    return (
        [tokenizer.bos_id, tokenizer.user_id]
        + tokenizer.encode("\n" + prompt.strip() + "\n")
        + [tokenizer.assistant_id]
        + tokenizer.encode("\n")
    )


def response_ids(tokenizer: ByteTokenizer, response: str) -> list[int]:
    """Token ids of the response part of the template (ends with <|eos|>)."""
    return tokenizer.encode(response.strip()) + [tokenizer.eos_id]


def render(tokenizer: ByteTokenizer, prompt: str, response: str) -> str:
    """The whole conversation as text, specials written out (for inspection)."""
    return tokenizer.decode(prompt_ids(tokenizer, prompt) + response_ids(tokenizer, response))
