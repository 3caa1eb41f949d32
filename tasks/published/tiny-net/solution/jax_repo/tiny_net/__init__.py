"""tiny_net in JAX: the regressor as pure functions over a parameter dict."""

from tiny_net.model import apply, load_params, mse_loss

__all__ = ["apply", "load_params", "mse_loss"]
