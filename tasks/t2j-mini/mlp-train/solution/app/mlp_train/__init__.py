"""mlp_train: a small MLP classifier package in JAX + optax (no PyTorch).

Modules mirror the original: `config`, `data`, `model`, `losses`, `optim`,
`checkpoint` (reads and writes the original's safetensors layout), `evaluate`,
`train` (entry point: `python -m mlp_train.train`).
"""

__all__ = ["checkpoint", "config", "data", "evaluate", "losses", "model", "optim", "train"]
