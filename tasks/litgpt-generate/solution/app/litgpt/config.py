"""The model configuration, read from litgpt's own `model_config.yaml`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(eq=False)  # hashed by identity: a static argument of jax.jit
class Config:
    """The fields of litgpt's `Config` a Llama-family model uses; the rest are kept in `extra`.

    Only the non-parallel-residual, RMSNorm, LLaMAMLP (SwiGLU), bias-free architecture with
    the standard (non-interleaved, unscaled) RoPE is supported; anything else is refused when
    the config is read.
    """

    name: str = ""
    block_size: int = 4096
    vocab_size: int = 50254
    padding_multiple: int = 512
    padded_vocab_size: int | None = None
    n_layer: int = 16
    n_head: int = 32
    n_query_groups: int | None = None
    n_embd: int = 4096
    head_size: int | None = None
    rotary_percentage: float = 0.25
    parallel_residual: bool = True
    bias: bool = True
    lm_head_bias: bool = False
    norm_class_name: str = "LayerNorm"
    norm_eps: float = 1e-5
    mlp_class_name: str = "GptNeoxMLP"
    intermediate_size: int | None = None
    rope_base: int = 10000
    rope_condense_ratio: int = 1
    scale_embeddings: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.head_size is None:
            self.head_size = self.n_embd // self.n_head
        if self.n_query_groups is None:
            self.n_query_groups = self.n_head
        if self.padded_vocab_size is None:
            multiple = self.padding_multiple
            self.padded_vocab_size = -(-self.vocab_size // multiple) * multiple
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.n_embd
        if self.n_head % self.n_query_groups:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_query_groups {self.n_query_groups}")
        unsupported = {
            "parallel_residual": self.parallel_residual, "bias": self.bias, "lm_head_bias": self.lm_head_bias,
            "norm_class_name": self.norm_class_name != "RMSNorm", "mlp_class_name": self.mlp_class_name != "LLaMAMLP",
        }  # fmt: skip
        for key in ("rope_adjustments", "sliding_window_size", "attention_logit_softcapping",
                    "final_logit_softcapping", "rope_indices", "latent_attention"):  # fmt: skip
            unsupported[key] = self.extra.get(key) is not None
        for key in ("rope_interleave", "norm_qk", "post_attention_norm", "post_mlp_norm", "shared_attention_norm"):
            unsupported[key] = bool(self.extra.get(key))
        wrong = [k for k, v in unsupported.items() if v]
        if wrong:
            raise ValueError(f"unsupported architecture setting(s): {', '.join(wrong)}")

    @property
    def rope_n_elem(self) -> int:
        """How many leading features of each head RoPE rotates."""
        return int(self.rotary_percentage * self.head_size)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Config:
        """Read a `model_config.yaml` (unknown keys go to `extra`); `kwargs` override it."""
        values = yaml.safe_load(Path(path).read_text()) or {}
        values.update(kwargs)
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        """A config from litgpt's keys (unknown keys go to `extra`)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in values.items() if k in known},
                   extra={k: v for k, v in values.items() if k not in known})  # fmt: skip
