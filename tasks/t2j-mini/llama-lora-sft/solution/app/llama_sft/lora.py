"""LoRA adapters: a frozen base kernel plus a trainable low-rank update scaled by alpha / rank.

Adapter pytree (`LoraParams`):
    {"layers": [{target: {"a": [in, rank], "b": [rank, out]} for target in cfg.targets}, ...]}
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from llama_sft.config import LoraConfig, ModelConfig

LoraParams = dict[str, Any]


def target_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """(in, out) of every projection LoRA can wrap."""
    d, f = cfg.dim, cfg.hidden_dim
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {
        "q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
        "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d),
    }


def init_lora(key: jax.Array, model_cfg: ModelConfig, lora_cfg: LoraConfig) -> LoraParams:
    """A ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's kaiming_uniform with a=sqrt(5)); B = 0,
    so the adapted model starts exactly at the base model."""
    shapes = target_shapes(model_cfg)
    layers = []
    for _ in range(model_cfg.n_layers):
        layer = {}
        for name in lora_cfg.targets:
            key, sub = jax.random.split(key)
            fan_in, fan_out = shapes[name]
            bound = 1.0 / jnp.sqrt(fan_in)
            layer[name] = {
                "a": jax.random.uniform(sub, (fan_in, lora_cfg.rank), jnp.float32, -bound, bound),
                "b": jnp.zeros((lora_cfg.rank, fan_out), jnp.float32),
            }
        layers.append(layer)
    return {"layers": layers}


def lora_linear(x: jax.Array, kernel: jax.Array, adapter: dict | None, scale: float) -> jax.Array:
    """x [..., in] @ kernel [in, out] plus the low-rank update (x @ a) @ b * scale."""
    y = x @ kernel
    if adapter is not None:
        y = y + (x @ adapter["a"]) @ adapter["b"] * scale
    return y


def count_parameters(tree: Any) -> int:
    return sum(int(leaf.size) for leaf in jax.tree.leaves(tree))
