"""mlp-train: candidate-side checks (parameter tree, live gradients, jit, the entry point)."""

PROBES = {
    "interface": {
        "id": "interface",
        "kind": "interface",
        "level": 0,
        "locate_failures": True,
        "component": "mlp_train",
        "description": "Every module and public name the instruction lists exists.",
    },
    "param_tree": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "param_tree",
        "kind": "param_tree",
        "level": 0,
        "component": "mlp_train.model.MLPClassifier",
        "description": "init_params gives a pytree of arrays whose state dict has the original's names and shapes.",
    },
    "grads_live": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "grad_liveness",
        "kind": "grad_liveness",
        "level": 0,
        "component": "mlp_train.train.train",
        "description": "Gradients of the training loss are finite and not all zero, for every parameter.",
    },
    "jit": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "jit",
        "kind": "jit",
        "level": 0,
        "component": "mlp_train.train.train",
        "description": "apply and the gradient of loss_fn trace under jax.jit (train mode with an rng too).",
    },
    "entrypoint": {
        "id": "entrypoint.train",
        "kind": "entrypoint",
        "level": 3,
        "component": "mlp_train.train.main",
        "timeout_s": 300,
        "description": "python -m mlp_train.train --data --init --out writes final.safetensors and metrics.json.",
    },
}


def _raw(env):
    from safetensors.numpy import load_file

    return load_file(str(env.assets / "init.safetensors"))


def check_param_tree(env):
    import jax
    import numpy as np
    from mlp_train.checkpoint import to_state_dict
    from mlp_train.config import ModelConfig
    from mlp_train.model import init_params

    params = init_params(ModelConfig(), jax.random.PRNGKey(0))
    leaves = jax.tree_util.tree_leaves(params)
    state = to_state_dict(params)
    raw = _raw(env)
    return {
        "leaves_are_arrays": bool(leaves) and all(isinstance(x, jax.Array) for x in leaves),
        "names_match": sorted(state) == sorted(raw),
        "shapes_match": all(np.shape(state[k]) == raw[k].shape for k in raw if k in state),
        "parameter_count_matches": sum(x.size for x in leaves) == sum(v.size for v in raw.values()),
    }


def _batch(env):
    import numpy as np

    rng = np.random.default_rng(env.seed)
    return rng.standard_normal((16, 16)).astype("float32"), rng.integers(0, 4, 16).astype("int64")


def check_grads_live(env):
    import jax
    import jax.numpy as jnp
    from mlp_train.checkpoint import from_state_dict, to_state_dict
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.train import loss_fn

    x, y = _batch(env)
    grads = jax.grad(loss_fn)(from_state_dict(_raw(env)), x, y, ModelConfig(dropout=0.0), TrainConfig(), train=False)
    state = to_state_dict(grads)
    return {
        "finite": all(bool(jnp.isfinite(jnp.asarray(g)).all()) for g in state.values()),
        "every_parameter_moves": all(bool((jnp.asarray(g) != 0).any()) for g in state.values()),
    }


def check_jit(env):
    import functools

    import jax
    from mlp_train.checkpoint import from_state_dict
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.model import apply
    from mlp_train.train import loss_fn

    x, y = _batch(env)
    params = from_state_dict(_raw(env))
    cfg, tcfg = ModelConfig(), TrainConfig()
    logits = jax.jit(functools.partial(apply, cfg=cfg, train=False))(params, x)
    grad = jax.jit(jax.grad(functools.partial(loss_fn, model_cfg=cfg, train_cfg=tcfg, train=True)))
    grads = grad(params, x, y, rng=jax.random.PRNGKey(1))
    return {
        "apply_traces": logits.shape == (16, 4),
        "grad_traces": bool(jax.tree_util.tree_leaves(grads)),
    }


def check_entrypoint(env):
    import json
    import subprocess
    import sys

    out = env.scratch / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlp_train.train",
            "--data",
            str(env.assets / "dataset.npz"),
            "--init",
            str(env.assets / "init.safetensors"),
            "--out",
            str(out),
            "--steps",
            "5",
        ],
        cwd=str(env.candidate),
        capture_output=True,
        text=True,
        timeout=280,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"entry point failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "writes_checkpoint": (out / "final.safetensors").is_file(),
        "metrics_complete": {"train_loss", "lr", "val_loss", "val_accuracy"} <= set(metrics),
        "five_steps": len(metrics["train_loss"]) == 5,
    }


INTERFACE = {
    "config": ["ModelConfig", "TrainConfig"],
    "data": [
        "Dataset",
        "load_dataset",
        "split_dataset",
        "fit_normalizer",
        "prepare_data",
        "iterate_batches",
        "batch_stream",
    ],
    "model": ["init_params", "apply", "hidden_states"],
    "losses": ["cross_entropy"],
    "optim": ["lr_multiplier", "lr_at", "make_optimizer"],
    "checkpoint": ["load_checkpoint", "save_checkpoint", "from_state_dict", "to_state_dict"],
    "evaluate": ["evaluate"],
    "train": ["loss_fn", "train", "main"],
}


def check_interface(env):
    import importlib

    out = {}
    for module, names in INTERFACE.items():
        mod = importlib.import_module(f"mlp_train.{module}")
        for name in names:
            out[f"{module}.{name}"] = hasattr(mod, name)
    return out
