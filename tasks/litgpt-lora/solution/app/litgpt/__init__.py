"""litgpt's GPT, LoRA and LoRA fine-tuning, in native JAX (no torch).

Parameters are explicit pytrees, PRNG keys are passed explicitly, and every step function is
pure. The modules mirror litgpt's: `config`, `model`, `lora`, `utils`,
`scripts.convert_lit_checkpoint` and `finetune.lora`.
"""

from litgpt.config import Config

__all__ = ["Config"]
