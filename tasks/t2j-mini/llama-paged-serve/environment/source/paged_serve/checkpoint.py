"""Loading the raw checkpoint (Hugging Face names, safetensors)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from paged_serve.config import ModelConfig
from paged_serve.model import LlamaForCausalLM

CHECKPOINT_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def load_model(assets_dir: str | Path) -> tuple[LlamaForCausalLM, ModelConfig]:
    """Build the model from `config.json` and load `model.safetensors` into it (strictly)."""
    assets_dir = Path(assets_dir)
    config = ModelConfig.from_json(assets_dir / CONFIG_FILE)
    model = LlamaForCausalLM(config)
    model.load_state_dict(load_file(str(assets_dir / CHECKPOINT_FILE)), strict=True)
    return model.eval(), config
