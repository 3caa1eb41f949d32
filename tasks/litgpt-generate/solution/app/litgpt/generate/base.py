"""litgpt's sampler and KV-cache generation loop (`litgpt.generate.base`), with explicit state.

The cache is a value: each step takes it and returns the updated one. Sampling takes a PRNG
key; `sample` is a pure function of its key (it may be vmapped over keys). The sampler applies
its transforms in litgpt's order: top-k, then temperature, then top-p.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from litgpt.config import Config
from litgpt.model import KVCache, forward, init_kv_cache

def multinomial_num_samples_1(probs: jax.Array, key: jax.Array) -> jax.Array:
    """One index drawn from `probs` `[V]`, as `[1]` int32."""
    return jax.random.categorical(key, jnp.log(probs), shape=(1,)).astype(jnp.int32)


def sample_top_p(logits: jax.Array, top_p: float) -> jax.Array:
    """Keep the smallest set of most likely tokens whose mass exceeds `top_p`; the rest -inf.

    Sorted ascending, a token is dropped while the cumulative mass up to it is <= 1 - top_p;
    the most likely token is always kept. logits: `[V]`.
    """
    order = jnp.argsort(logits)
    cumulative = jnp.cumsum(jax.nn.softmax(logits[order]))
    remove_sorted = (cumulative <= (1 - top_p)).at[-1].set(False)
    remove = jnp.zeros_like(remove_sorted).at[order].set(remove_sorted)
    return jnp.where(remove, -jnp.inf, logits)


def sample(
    logits: jax.Array, temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0,
    *, key: jax.Array | None = None,
) -> jax.Array:  # fmt: skip
    """The next token from the last position's logits.

    Args:
        logits: `[1, T, V]`; only `logits[0, -1]` is used.
        temperature, top_k, top_p: applied as top-k, then temperature, then top-p; with
            temperature 0 or top_p 0 the most likely remaining token is taken.
        key: a PRNG key (needed unless the choice is greedy).

    Returns:
        `[1]` int32.
    """
    if top_p < 0.0 or top_p > 1.0:
        raise ValueError(f"top_p must be in [0, 1], got {top_p}")
    logits = jnp.asarray(logits)[0, -1]
    if top_k is not None:
        values, indices = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))
        logits = jnp.full_like(logits, -jnp.inf).at[indices].set(values)
    if temperature > 0.0 and top_p > 0.0:
        logits = logits / temperature
        if top_p < 1.0:
            logits = sample_top_p(logits, top_p)
        if key is None:
            raise ValueError("sampling needs a PRNG key")
        return multinomial_num_samples_1(jax.nn.softmax(logits, axis=-1), key)
    return jnp.argmax(logits, axis=-1, keepdims=True).astype(jnp.int32)


_sample = jax.jit(sample, static_argnames=("temperature", "top_k", "top_p"))


def next_token(
    params: Any, config: Config, input_pos: jax.Array, x: jax.Array, kv_cache: list[KVCache],
    *, key: jax.Array | None = None, **sample_kwargs: Any,
) -> tuple[jax.Array, list[KVCache]]:  # fmt: skip
    """One forward step through the cache and the token it samples: (`[1]` int32, the cache)."""
    logits, kv_cache = forward(params, config, x, input_pos, kv_cache)
    return _sample(logits, key=key, **sample_kwargs), kv_cache


def generate_fn(
    params: Any, config: Config, prompt: jax.Array, max_returned_tokens: int, *,
    temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0,
    stop_tokens: tuple[list[int], ...] = (), include_prompt: bool, include_eos: bool,
    key: jax.Array | None = None,
) -> Iterator[jax.Array]:  # fmt: skip
    """Yield the tokens generated for one prompt `[T]` (litgpt's `generate_fn`).

    The prompt fills the cache in one step; each further step feeds the last token at the next
    position. A stop sequence ends generation (its tokens yielded only with `include_eos`);
    tokens that may be the start of a stop sequence are held back until that is decided.
    """
    prompt = jnp.asarray(prompt, jnp.int32)
    prompt_size = prompt.shape[0]
    if max_returned_tokens <= prompt_size:
        raise ValueError(f"Not enough space for {prompt_size} prompt tokens in a context length of {max_returned_tokens}.")
    if config.block_size < max_returned_tokens - 1:
        raise NotImplementedError(f"max_seq_length {config.block_size} needs to be >= {max_returned_tokens - 1}")
    if include_prompt:
        yield prompt
    kv_cache = init_kv_cache(config, 1)  # the full block: one compiled decode step for every prompt
    stop_progress = [0] * len(stop_tokens)
    yielded_idx = 0
    tokens: list[jax.Array] = []
    token = prompt
    input_pos = jnp.arange(prompt_size, dtype=jnp.int32)
    for current_idx in range(max_returned_tokens - prompt_size):
        step_key = None
        if key is not None:
            key, step_key = jax.random.split(key)
        token, kv_cache = next_token(params, config, input_pos, token.reshape(1, -1), kv_cache, key=step_key,
                                     temperature=temperature, top_k=top_k, top_p=top_p)  # fmt: skip
        tokens.append(token)
        int_token = int(token[0])
        for i, seq in enumerate(stop_tokens):
            if int_token == seq[stop_progress[i]]:
                stop_progress[i] += 1
                if stop_progress[i] == len(seq):
                    if include_eos:
                        yield from tokens[yielded_idx:]
                    return
            else:
                stop_progress[i] = 0
        safe_idx = len(tokens) - max(stop_progress) if stop_tokens else current_idx + 1
        if yielded_idx < safe_idx:
            yield from tokens[yielded_idx:safe_idx]
            yielded_idx = safe_idx
        input_pos = jnp.array([prompt_size + current_idx], dtype=jnp.int32)
    if yielded_idx < len(tokens):
        yield from tokens[yielded_idx:]


def generate(
    params: Any, config: Config, prompt: jax.Array, max_returned_tokens: int, *,
    temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0, eos_id: int | None = None,
    include_prompt: bool = True, key: jax.Array | None = None,
) -> jax.Array:  # fmt: skip
    """The prompt (if `include_prompt`) followed by the generated tokens, `[N]` int32.

    Generation stops after `eos_id` (which is included) or at `max_returned_tokens` in all.
    """
    token_list = list(generate_fn(
        params, config, prompt, max_returned_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        stop_tokens=([eos_id],) if eos_id is not None else (), include_prompt=include_prompt, include_eos=True,
        key=key,
    ))  # fmt: skip
    return jnp.concatenate(token_list) if token_list else jnp.zeros((0,), jnp.int32)


__all__ = ["generate", "generate_fn", "multinomial_num_samples_1", "next_token", "sample", "sample_top_p"]
