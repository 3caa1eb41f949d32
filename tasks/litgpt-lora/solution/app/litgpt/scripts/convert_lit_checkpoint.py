"""Between litgpt's flat state dicts (names and `[out, in]` layouts) and this port's parameter pytree.

A base checkpoint (`litgpt.model.GPT`) names a linear's weight `attn.qkv.weight`; the LoRA model
(`litgpt.lora.GPT`) names it `attn.qkv.linear.weight` beside `attn.qkv.lora_A`/`lora_B`. Both are
read; the pytree always has the LoRA model's structure, and `state_dict_from_params` writes its
names.
"""

from __future__ import annotations

import re
from typing import Any

import jax.numpy as jnp
import numpy as np

from litgpt.config import Config

LINEARS = re.compile(r"^(lm_head|transformer\.h\.\d+\.(attn\.(qkv|proj)|mlp\.(fc_1|fc_2|proj)))\.(weight|bias)$")


def params_from_state_dict(state_dict: dict[str, Any], config: Config) -> dict[str, Any]:
    """The pytree of a state dict (base or LoRA names): every entry, as a float32 jax array.

    Raises:
        ValueError: a layer index outside the config's `n_layer`.
    """
    params: dict[str, Any] = {}
    for name, value in state_dict.items():
        name = LINEARS.sub(lambda m: f"{m.group(1)}.linear.{m.group(5)}", name)
        parts = name.split(".")
        node: Any = params
        for part in parts[:-1]:
            if isinstance(node, list):  # the layers of transformer.h
                index = int(part)
                if index >= config.n_layer:
                    raise ValueError(f"{name}: layer {index} is beyond n_layer = {config.n_layer}")
                while len(node) <= index:
                    node.append({})
                node = node[index]
            else:
                node = node.setdefault(part, [] if part == "h" else {})
        node[parts[-1]] = jnp.asarray(np.asarray(value), dtype=jnp.float32)
    return params


def state_dict_from_params(params: dict[str, Any]) -> dict[str, np.ndarray]:
    """litgpt.lora.GPT's state-dict names for every leaf of the pytree, as numpy arrays."""
    flat: dict[str, np.ndarray] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{prefix}{index}.")
        else:
            flat[prefix[:-1]] = np.asarray(node)

    walk(params, "")
    return flat
