"""Converting the raw checkpoint (Hugging Face names, safetensors) into a parameter pytree, without torch."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file

from paged_serve.config import ModelConfig
from paged_serve.model import Params

CHECKPOINT_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def load_params(checkpoint_path: str | Path, config: ModelConfig) -> Params:
    """Read `model.safetensors` and lay it out as the pytree `model.prefill`/`decode` take.

    Linear weights are stored [out, in] and become [in, out].

    Raises:
        KeyError: a tensor the model needs is missing.
        ValueError: a tensor has an unexpected shape.
    """
    raw = load_file(str(checkpoint_path))

    def get(name: str, shape: tuple[int, ...], transpose: bool = False) -> jnp.ndarray:
        value = np.asarray(raw[name], np.float32)
        value = value.T if transpose else value
        if value.shape != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {value.shape}")
        return jnp.asarray(value)

    c = config
    hd = c.head_dim
    layers = []
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        layers.append({
            "attn_norm": get(p + "input_layernorm.weight", (c.dim,)),
            "wq": get(p + "self_attn.q_proj.weight", (c.dim, c.n_heads * hd), transpose=True),
            "wk": get(p + "self_attn.k_proj.weight", (c.dim, c.n_kv_heads * hd), transpose=True),
            "wv": get(p + "self_attn.v_proj.weight", (c.dim, c.n_kv_heads * hd), transpose=True),
            "wo": get(p + "self_attn.o_proj.weight", (c.n_heads * hd, c.dim), transpose=True),
            "mlp_norm": get(p + "post_attention_layernorm.weight", (c.dim,)),
            "w_gate": get(p + "mlp.gate_proj.weight", (c.dim, c.hidden_dim), transpose=True),
            "w_up": get(p + "mlp.up_proj.weight", (c.dim, c.hidden_dim), transpose=True),
            "w_down": get(p + "mlp.down_proj.weight", (c.hidden_dim, c.dim), transpose=True),
        })
    return {
        "embed": get("model.embed_tokens.weight", (c.vocab_size, c.dim)),
        "layers": layers,
        "norm": get("model.norm.weight", (c.dim,)),
        "lm_head": get("lm_head.weight", (c.dim, c.vocab_size), transpose=True),
    }


def load_model(assets_dir: str | Path) -> tuple[Params, ModelConfig]:
    """Read `config.json` and convert `model.safetensors` from an assets directory."""
    assets_dir = Path(assets_dir)
    config = ModelConfig.from_json(assets_dir / CONFIG_FILE)
    return load_params(assets_dir / CHECKPOINT_FILE, config), config
