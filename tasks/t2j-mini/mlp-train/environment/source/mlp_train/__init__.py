"""mlp_train: a small PyTorch MLP classifier package.

Modules: `config` (model and training settings), `data` (dataset loading, split,
normalization, batching), `model` (the network), `losses` (label-smoothed cross
entropy), `optim` (AdamW with warmup + cosine schedule), `checkpoint`
(safetensors save/load), `evaluate` (held-out loss and accuracy), `train` (the
training entry point: `python -m mlp_train.train`).
"""

__all__ = ["checkpoint", "config", "data", "evaluate", "losses", "model", "optim", "train"]
