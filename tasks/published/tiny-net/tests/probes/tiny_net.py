"""tiny_net: forward pass, loss and gradients against the original (probe-file format: probes/README.md)."""

PROBES = {
    "forward": {
        "id": "forward.predictions",
        "level": 1,
        "component": "tiny_net.model.TinyNet",
        "description": "Predictions of the checkpointed model on a fixed batch.",
    },
    "loss_grads": {
        "id": "loss.mse_and_grads",
        "level": 2,
        "component": "tiny_net.model.mse_loss",
        "uses": ["tiny_net.model.TinyNet"],
        "description": "MSE loss and its gradient for every parameter, in the original's names.",
        "compare": {"loss": "scalar", "grads/*": "tensor"},
    },
}


def _ckpt(env):
    return str(env.assets / "model.safetensors")


def inputs_forward(env):
    return {"x": env.rng.standard_normal((8, 6)).astype("float32")}


def reference_forward(env):
    import torch
    from tiny_net.model import load_model

    model = load_model(_ckpt(env)).to(getattr(torch, env.dtype))
    with torch.no_grad():
        return {"y": model(torch.tensor(env.inputs["x"], dtype=getattr(torch, env.dtype)))}


def candidate_forward(env):
    from tiny_net.model import apply, load_params

    return {"y": apply(load_params(_ckpt(env)), env.inputs["x"])}


def inputs_loss_grads(env):
    return {
        "x": env.rng.standard_normal((16, 6)).astype("float32"),
        "y": env.rng.standard_normal((16, 3)).astype("float32"),
    }


def reference_loss_grads(env):
    import torch
    from tiny_net.model import load_model, mse_loss

    dtype = getattr(torch, env.dtype)
    model = load_model(_ckpt(env)).to(dtype)
    loss = mse_loss(model, torch.tensor(env.inputs["x"], dtype=dtype), torch.tensor(env.inputs["y"], dtype=dtype))
    loss.backward()
    return {"loss": loss, "grads": {name: p.grad for name, p in model.named_parameters()}}


def candidate_loss_grads(env):
    import jax
    from tiny_net.model import load_params, mse_loss

    loss, grads = jax.value_and_grad(mse_loss)(load_params(_ckpt(env)), env.inputs["x"], env.inputs["y"])
    return {"loss": loss, "grads": grads}


def check_jit(env):
    import jax
    from tiny_net.model import apply, load_params

    y = jax.jit(apply)(load_params(_ckpt(env)), env.rng.standard_normal((2, 6)).astype("float32"))
    return {"traces_under_jit": y.shape == (2, 3)}
