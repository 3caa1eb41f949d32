"""litgpt's GPT and its KV-cache generation, in native JAX (no torch).

Parameters are explicit pytrees named as litgpt's state dict names them; the KV cache is a
value each step takes and returns; PRNG keys are passed explicitly. The modules mirror
litgpt's: `config`, `model`, `utils` (the checkpoint) and `generate.base`.
"""

from litgpt.config import Config

__all__ = ["Config"]
