"""tiny_net: a small PyTorch regressor (Linear -> LayerNorm -> tanh -> Linear) and its loss."""

from tiny_net.model import TinyNet, load_model, mse_loss

__all__ = ["TinyNet", "load_model", "mse_loss"]
