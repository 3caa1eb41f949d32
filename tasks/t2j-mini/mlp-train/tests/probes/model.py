"""mlp-train: checkpoint conversion, blocks, the classifier, the loss (from the instruction and /source)."""

PROBES = {
    "convert": {
        "id": "checkpoint.load",
        "level": 1,
        "component": "mlp_train.checkpoint.load_checkpoint",
        "description": "load_checkpoint reads the raw checkpoint; to_state_dict gives back its names, layouts, values.",
    },
    "save": {
        "id": "checkpoint.save",
        "level": 1,
        "component": "mlp_train.checkpoint.save_checkpoint",
        "description": "save_checkpoint writes the original's names and layouts.",
    },
    "block": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "forward.block0",
        "level": 1,
        "component": "mlp_train.model.MLPBlock",
        "description": "The first block (Linear, LayerNorm, GELU) in eval mode.",
    },
    "hidden": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "forward.hidden_states",
        "level": 2,
        "component": "mlp_train.model.MLPClassifier.hidden_states",
        "description": "Every block's output in eval mode.",
    },
    "logits": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "forward.logits",
        "level": 2,
        "component": "mlp_train.model.MLPClassifier",
        "description": "Logits of the classifier in eval mode.",
        "compare": {"logits": "tensor", "probs": "distributional"},
    },
    "loss": {
        "id": "loss.cross_entropy",
        "level": 1,
        "component": "mlp_train.losses.cross_entropy",
        "description": "Label-smoothed cross entropy on fixed logits and labels.",
    },
}


def _ckpt(env):
    return str(env.assets / "init.safetensors")


def _raw(env):
    from safetensors.numpy import load_file

    return load_file(_ckpt(env))


def _torch_model(env):
    """The original's classifier, loaded by the original's load_checkpoint, in the working dtype."""
    import torch
    from mlp_train.checkpoint import load_checkpoint
    from mlp_train.config import ModelConfig
    from mlp_train.model import MLPClassifier

    model = load_checkpoint(MLPClassifier(ModelConfig()), _ckpt(env))
    return model.to(getattr(torch, env.dtype)).eval()


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def _params(env):
    from mlp_train.checkpoint import from_state_dict

    return from_state_dict(_raw(env))


def _features(env):
    return {"x": env.rng.standard_normal((8, 16)).astype("float32")}


def inputs_convert(env):
    return {}


def reference_convert(env):
    from mlp_train.checkpoint import load_checkpoint
    from mlp_train.config import ModelConfig
    from mlp_train.model import MLPClassifier

    # The checkpoint is float32 whatever the working dtype: so is what the candidate reads back.
    model = load_checkpoint(MLPClassifier(ModelConfig()), _ckpt(env))
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def candidate_convert(env):
    import numpy as np
    from mlp_train.checkpoint import load_checkpoint, to_state_dict

    return {k: np.asarray(v) for k, v in to_state_dict(load_checkpoint(_ckpt(env))).items()}


def reference_save(env):
    from mlp_train.checkpoint import load_checkpoint, save_checkpoint
    from mlp_train.config import ModelConfig
    from mlp_train.model import MLPClassifier
    from safetensors.numpy import load_file

    path = str(env.scratch / "saved.safetensors")
    save_checkpoint(load_checkpoint(MLPClassifier(ModelConfig()), _ckpt(env)), path)
    return dict(load_file(path))


def candidate_save(env):
    from mlp_train.checkpoint import save_checkpoint
    from safetensors.numpy import load_file

    path = str(env.scratch / "saved.safetensors")
    save_checkpoint(_params(env), path)
    return dict(load_file(path))


def inputs_block(env):
    return _features(env)


def reference_block(env):
    return {"h": _torch_model(env).blocks[0](_t(env, env.inputs["x"]))}


def candidate_block(env):
    from mlp_train.config import ModelConfig
    from mlp_train.model import hidden_states

    return {"h": hidden_states(_params(env), env.inputs["x"], ModelConfig())[0]}


def inputs_hidden(env):
    return _features(env)


def reference_hidden(env):
    return {"states": list(_torch_model(env).hidden_states(_t(env, env.inputs["x"])))}


def candidate_hidden(env):
    from mlp_train.config import ModelConfig
    from mlp_train.model import hidden_states

    return {"states": list(hidden_states(_params(env), env.inputs["x"], ModelConfig()))}


def inputs_logits(env):
    return _features(env)


def reference_logits(env):
    logits = _torch_model(env)(_t(env, env.inputs["x"]))
    return {"logits": logits, "probs": logits}


def candidate_logits(env):
    from mlp_train.config import ModelConfig
    from mlp_train.model import apply

    logits = apply(_params(env), env.inputs["x"], ModelConfig(), train=False)
    return {"logits": logits, "probs": logits}


def inputs_loss(env):
    return {
        "logits": (3.0 * env.rng.standard_normal((16, 4))).astype("float32"),
        "labels": env.rng.integers(0, 4, size=16).astype("int64"),
    }


def reference_loss(env):
    import torch
    from mlp_train.losses import cross_entropy

    logits, labels = _t(env, env.inputs["logits"]), torch.from_numpy(env.inputs["labels"])
    return {"smoothed": cross_entropy(logits, labels, 0.1), "plain": cross_entropy(logits, labels)}


def candidate_loss(env):
    from mlp_train.losses import cross_entropy

    logits, labels = env.inputs["logits"], env.inputs["labels"]
    return {"smoothed": cross_entropy(logits, labels, 0.1), "plain": cross_entropy(logits, labels)}
