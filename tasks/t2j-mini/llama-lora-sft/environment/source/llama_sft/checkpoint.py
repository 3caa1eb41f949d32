"""Loading the raw checkpoint (Hugging Face Llama names, [out, in] weights) and LoRA adapters.

Adapter files hold `layers.{i}.{target}.lora_A` [rank, in] and `.lora_B` [out, rank].
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from llama_sft.config import LoraConfig, ModelConfig
from llama_sft.lora import lora_modules
from llama_sft.modeling.llama import LlamaForCausalLM

CHECKPOINT_FILE = "model.safetensors"
CONFIG_FILE = "config.json"

_BLOCK_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "mlp_norm.weight",
    "self_attn.q_proj.weight": "attn.q_proj.weight",
    "self_attn.k_proj.weight": "attn.k_proj.weight",
    "self_attn.v_proj.weight": "attn.v_proj.weight",
    "self_attn.o_proj.weight": "attn.o_proj.weight",
    "mlp.gate_proj.weight": "mlp.gate_proj.weight",
    "mlp.up_proj.weight": "mlp.up_proj.weight",
    "mlp.down_proj.weight": "mlp.down_proj.weight",
}


def raw_to_module_name(raw: str) -> str:
    """Map a raw checkpoint name to the name in `LlamaForCausalLM.state_dict()`."""
    if raw == "model.embed_tokens.weight":
        return "embed.weight"
    if raw == "model.norm.weight":
        return "final_norm.weight"
    if raw == "lm_head.weight":
        return "lm_head.weight"
    prefix = "model.layers."
    if raw.startswith(prefix):
        index, rest = raw[len(prefix):].split(".", 1)
        if rest in _BLOCK_NAMES:
            return f"layers.{index}.{_BLOCK_NAMES[rest]}"
    raise KeyError(f"unexpected tensor in checkpoint: {raw}")


def load_checkpoint(checkpoint_dir: str | Path, cfg: ModelConfig) -> LlamaForCausalLM:
    """Build the model and load the raw weights into it (strict: no missing or extra names)."""
    raw = load_file(str(Path(checkpoint_dir) / CHECKPOINT_FILE))
    state = {raw_to_module_name(k): v.float() for k, v in raw.items()}
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(state, strict=True)
    return model


def save_adapter(model: torch.nn.Module, cfg: LoraConfig, path: str | Path) -> None:
    tensors = {}
    for name, module in lora_modules(model, cfg).items():
        tensors[f"{name}.lora_A"] = module.lora_A.detach().contiguous()
        tensors[f"{name}.lora_B"] = module.lora_B.detach().contiguous()
    save_file(tensors, str(path))


def load_adapter(model: torch.nn.Module, cfg: LoraConfig, path: str | Path) -> None:
    """Copy adapter factors from a file into a model that already has LoRA applied."""
    tensors = load_file(str(path))
    modules = lora_modules(model, cfg)
    expected = {f"{n}.lora_{f}" for n in modules for f in "AB"}
    if set(tensors) != expected:
        raise ValueError(f"adapter {path} does not match the model's LoRA layout")
    with torch.no_grad():
        for name, module in modules.items():
            module.lora_A.copy_(tensors[f"{name}.lora_A"])
            module.lora_B.copy_(tensors[f"{name}.lora_B"])
