"""LoRA for litgpt's GPT: LoRA linears (plain and fused-QKV), initialisation, merging, trainable marking.

A LoRA-wrapped linear is a dict `{"linear": {"weight": [out, in]}, "lora_A": [r * n, in],
"lora_B": [out', r]}` (litgpt's names and layouts); a layer LoRA leaves out has only
`"linear"`. For the fused QKV projection, `n` counts the enabled parts among query, key and
value, `out'` their summed width, and the update is zero for the parts left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from litgpt import model
from litgpt.config import Config as BaseConfig

Params = dict[str, Any]


@dataclass
class Config(BaseConfig):
    """`litgpt.config.Config` plus the LoRA settings."""

    lora_r: int = 0
    lora_alpha: int = 1
    lora_dropout: float = 0.0
    lora_query: bool = False
    lora_key: bool = False
    lora_value: bool = False
    lora_projection: bool = False
    lora_mlp: bool = False
    lora_head: bool = False

    @property
    def scaling(self) -> float:
        """alpha / r: the factor of every LoRA update."""
        return self.lora_alpha / self.lora_r

    def qkv_parts(self) -> list[tuple[int, int]]:
        """(start, width) of the enabled query, key and value columns of the fused projection."""
        q, kv = self.n_head * self.head_size, self.n_query_groups * self.head_size
        parts = [(0, q, self.lora_query), (q, kv, self.lora_key), (q + kv, kv, self.lora_value)]
        return [(start, width) for start, width, enabled in parts if enabled]


def lora_delta(p: Params, x: jax.Array, config: Config) -> jax.Array:
    """The LoRA update of one linear for input `x` `[..., in]`, already scaled: `[..., out]`.

    Where A stacks several parts (the fused QKV), each part's rank-r slice of A feeds only its
    own rows of B; the result is scattered into the enabled columns, zero elsewhere.
    """
    a, b = p["lora_A"], p["lora_B"]
    out = p["linear"]["weight"].shape[0]
    rank = b.shape[1]
    after_a = x @ a.T
    if a.shape[0] == rank and b.shape[0] == out:
        return (after_a @ b.T) * config.scaling
    parts = config.qkv_parts()
    pieces, row = [], 0
    for i, (_, width) in enumerate(parts):
        pieces.append(after_a[..., i * rank : (i + 1) * rank] @ b[row : row + width].T)
        row += width
    full = jnp.zeros((*x.shape[:-1], out), dtype=after_a.dtype)
    for (start, width), piece in zip(parts, pieces, strict=True):
        full = full.at[..., start : start + width].set(piece)
    return full * config.scaling


def lora_linear(p: Params, x: jax.Array, config: Config) -> jax.Array:
    """A LoRA-wrapped linear: the frozen linear plus its LoRA update (none without factors)."""
    out = model.dense(p["linear"], x)
    return out + lora_delta(p, x, config).astype(out.dtype) if "lora_A" in p else out


def gpt_forward(params: Params, config: Config, idx: jax.Array) -> jax.Array:
    """Token ids `[B, T]` to logits `[B, T, padded_vocab_size]`, LoRA updates included."""
    return model.gpt_forward(params, config, idx, linear=lambda p, x: lora_linear(p, x, config))


def lora_targets(config: Config) -> list[tuple[tuple[str | int, ...], int, int, int]]:
    """(path, in_features, rows of lora_A, rows of lora_B) of every linear LoRA wraps."""
    if config.lora_r <= 0:
        return []
    r, e, hs = config.lora_r, config.n_embd, config.head_size
    targets = []
    for i in range(config.n_layer):
        layer = ("transformer", "h", i)
        parts = config.qkv_parts()
        if parts:
            targets.append((layer + ("attn", "qkv"), e, r * len(parts), sum(w for _, w in parts)))
        if config.lora_projection:
            targets.append((layer + ("attn", "proj"), config.n_head * hs, r, e))
        if config.lora_mlp:
            targets += [(layer + ("mlp", "fc_1"), e, r, config.intermediate_size),
                        (layer + ("mlp", "fc_2"), e, r, config.intermediate_size),
                        (layer + ("mlp", "proj"), config.intermediate_size, r, e)]  # fmt: skip
    if config.lora_head:
        targets.append((("lm_head",), e, r, config.padded_vocab_size))
    return targets


def _at(tree: Params, path: tuple) -> Params:
    for key in path:
        tree = tree[key]
    return tree


def init_lora(params: Params, config: Config, key: jax.Array) -> Params:
    """`params` with fresh LoRA factors where the config enables LoRA (existing ones replaced).

    A is kaiming-uniform with a = sqrt(5) (uniform in ±1/sqrt(in_features)), B is zero, so the
    model starts exactly as the base model.
    """
    params = jax.tree_util.tree_map(lambda v: v, params)  # a new tree; the arrays are shared
    targets = lora_targets(config)
    for (path, fan_in, rows_a, rows_b), k in zip(targets, jax.random.split(key, max(len(targets), 1)), strict=False):
        layer = _at(params, path)
        bound = 1.0 / math.sqrt(fan_in)
        layer["lora_A"] = jax.random.uniform(k, (rows_a, fan_in), jnp.float32, -bound, bound)
        layer["lora_B"] = jnp.zeros((rows_b, config.lora_r), jnp.float32)
    return params


def init_params(config: Config, key: jax.Array) -> Params:
    """A fresh model: linears and embedding normal(0, 0.02), norms one, LoRA as `init_lora`."""
    base_key, lora_key = jax.random.split(key)
    keys = iter(jax.random.split(base_key, 8 * config.n_layer + 4))
    e, hs = config.n_embd, config.head_size

    def linear(out: int, inp: int) -> Params:
        return {"linear": {"weight": 0.02 * jax.random.normal(next(keys), (out, inp), jnp.float32)}}

    layers = []
    for _ in range(config.n_layer):
        layers.append({
            "norm_1": {"weight": jnp.ones((e,), jnp.float32)},
            "attn": {"qkv": linear((config.n_head + 2 * config.n_query_groups) * hs, e), "proj": linear(e, config.n_head * hs)},
            "norm_2": {"weight": jnp.ones((e,), jnp.float32)},
            "mlp": {"fc_1": linear(config.intermediate_size, e), "fc_2": linear(config.intermediate_size, e),
                    "proj": linear(e, config.intermediate_size)},
        })  # fmt: skip
    params = {
        "transformer": {
            "wte": {"weight": 0.02 * jax.random.normal(next(keys), (config.padded_vocab_size, e), jnp.float32)},
            "h": layers,
            "ln_f": {"weight": jnp.ones((e,), jnp.float32)},
        },
        "lm_head": linear(config.padded_vocab_size, e),
    }
    return init_lora(params, config, lora_key)


def merge_lora_weights(params: Params, config: Config) -> Params:
    """`params` with every LoRA update added into its linear's weight and the factors dropped.

    The result's forward equals the unmerged model's (`gpt_forward`), without LoRA's cost.
    """
    params = jax.tree_util.tree_map(lambda v: v, params)
    for path, fan_in, _, _ in lora_targets(config):
        layer = _at(params, path)
        if "lora_A" not in layer:
            continue
        weight = layer["linear"]["weight"]
        delta = lora_delta(layer, jnp.eye(fan_in, dtype=weight.dtype), config).T  # [out, in]
        layer["linear"] = {**layer["linear"], "weight": weight + delta.astype(weight.dtype)}
        del layer["lora_A"], layer["lora_B"]
    return params


def lora_filter(key: str, value: Any) -> bool:
    """Whether a state-dict entry belongs to LoRA (what a LoRA checkpoint keeps)."""
    return "lora_" in key


def mark_only_lora_as_trainable(params: Params) -> Params:
    """A pytree of `params`' structure: True for LoRA factors (trained), False for the rest (frozen)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: any("lora_" in str(getattr(k, "key", "")) for k in path), params
    )
