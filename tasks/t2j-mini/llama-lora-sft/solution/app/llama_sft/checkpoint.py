"""Converting the raw checkpoint (Hugging Face Llama names, [out, in] weights) without torch,
and reading/writing LoRA adapter files.

Adapter files hold `layers.{i}.{target}.lora_A` [rank, in] and `.lora_B` [out, rank], the
layout of the PyTorch original, so adapters move between the two implementations.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file, save_file

from llama_sft.config import LoraConfig, ModelConfig

CHECKPOINT_FILE = "model.safetensors"
CONFIG_FILE = "config.json"

_BLOCK_NAMES = {
    "input_layernorm.weight": ("attn_norm", False),
    "post_attention_layernorm.weight": ("mlp_norm", False),
    "self_attn.q_proj.weight": ("q_proj", True),
    "self_attn.k_proj.weight": ("k_proj", True),
    "self_attn.v_proj.weight": ("v_proj", True),
    "self_attn.o_proj.weight": ("o_proj", True),
    "mlp.gate_proj.weight": ("gate_proj", True),
    "mlp.up_proj.weight": ("up_proj", True),
    "mlp.down_proj.weight": ("down_proj", True),
}


def convert_checkpoint(tensors: dict[str, np.ndarray], cfg: ModelConfig) -> dict:
    """Raw tensors -> the base parameter pytree (see `llama_sft.modeling`); linear weights
    are transposed to [in, out] kernels.

    Raises:
        KeyError: a tensor is missing from, or unexpected in, the raw checkpoint.
    """
    remaining = dict(tensors)

    def take(name: str, transpose: bool = False) -> jnp.ndarray:
        if name not in remaining:
            raise KeyError(f"checkpoint is missing {name}")
        value = np.asarray(remaining.pop(name), dtype=np.float32)
        return jnp.asarray(value.T if transpose else value)

    params: dict = {"embed": take("model.embed_tokens.weight"), "layers": []}
    for i in range(cfg.n_layers):
        layer = {}
        for raw, (name, transpose) in _BLOCK_NAMES.items():
            layer[name] = take(f"model.layers.{i}.{raw}", transpose)
        params["layers"].append(layer)
    params["final_norm"] = take("model.norm.weight")
    params["lm_head"] = take("lm_head.weight", transpose=True)
    if remaining:
        raise KeyError(f"unexpected tensors in checkpoint: {sorted(remaining)[:5]}")
    return params


def load_checkpoint(checkpoint_dir: str | Path, cfg: ModelConfig) -> dict:
    """Read `model.safetensors` from `checkpoint_dir` and convert it."""
    return convert_checkpoint(load_file(str(Path(checkpoint_dir) / CHECKPOINT_FILE)), cfg)


def save_adapter(lora: dict, path: str | Path) -> None:
    tensors = {}
    for i, layer in enumerate(lora["layers"]):
        for name, ab in layer.items():
            tensors[f"layers.{i}.{name}.lora_A"] = np.ascontiguousarray(np.asarray(ab["a"]).T)
            tensors[f"layers.{i}.{name}.lora_B"] = np.ascontiguousarray(np.asarray(ab["b"]).T)
    save_file(tensors, str(path))


def load_adapter(path: str | Path, model_cfg: ModelConfig, lora_cfg: LoraConfig) -> dict:
    """Read an adapter file into the adapter pytree (see `llama_sft.lora`).

    Raises:
        ValueError: the file does not hold exactly the factors the configuration asks for.
    """
    tensors = load_file(str(path))
    expected = {
        f"layers.{i}.{name}.lora_{f}"
        for i in range(model_cfg.n_layers) for name in lora_cfg.targets for f in "AB"
    }
    if set(tensors) != expected:
        raise ValueError(f"adapter {path} does not match the LoRA layout of the configuration")
    layers = []
    for i in range(model_cfg.n_layers):
        layers.append({
            name: {
                "a": jnp.asarray(tensors[f"layers.{i}.{name}.lora_A"].T, jnp.float32),
                "b": jnp.asarray(tensors[f"layers.{i}.{name}.lora_B"].T, jnp.float32),
            }
            for name in lora_cfg.targets
        })
    return {"layers": layers}
