"""llama_sft: LoRA supervised fine-tuning of a small Llama-style decoder (PyTorch)."""

__version__ = "0.3.0"
