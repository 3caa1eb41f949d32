"""paged_serve: a small paged-attention serving engine for Llama-style models (JAX)."""

from paged_serve.config import EngineConfig, ModelConfig
from paged_serve.engine import LLMEngine
from paged_serve.sampler import SamplingParams
from paged_serve.sequence import RequestOutput

__all__ = ["EngineConfig", "LLMEngine", "ModelConfig", "RequestOutput", "SamplingParams"]
