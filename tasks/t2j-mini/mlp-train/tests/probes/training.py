"""mlp-train: data pipeline, gradients, schedule, optimizer steps, evaluation and the training run."""

PROBES = {
    "data": {
        "id": "data.pipeline",
        "level": 1,
        "component": "mlp_train.data.prepare_data",
        "description": "Split, normalization and the first batches are those of the original.",
    },
    "split": {
        "id": "data.split",
        "level": 1,
        "component": "mlp_train.data.split_dataset",
        "description": "split_dataset puts the same examples in the same order in train and validation.",
    },
    "epochs": {
        "id": "data.epochs",
        "level": 1,
        "component": "mlp_train.data.iterate_batches",
        "description": "Each (seed, epoch) has its own shuffle: first batches of three epochs, two seeds.",
    },
    "grads": {
        # One loss and its gradients, not a run of train (train.run covers that): the reference
        # runs the original's classifier forward and backward through its cross_entropy.
        "uses": ["mlp_train.checkpoint.load_checkpoint", "mlp_train.losses.cross_entropy"],
        "id": "grads.loss",
        "level": 2,
        "component": "mlp_train.model.MLPClassifier",
        "description": "Training loss (label smoothing) and its gradients by parameter name, dropout off.",
        "compare": {"loss": "scalar", "grads/*": "tensor"},
    },
    "schedule": {
        "id": "optim.schedule",
        "level": 1,
        "component": "mlp_train.optim.lr_multiplier",
        "description": "Learning rate of every step: warmup then cosine decay to min_lr_ratio.",
    },
    "steps": {
        "uses": ["mlp_train.checkpoint.load_checkpoint"],
        "id": "optim.steps",
        "level": 2,
        "component": "mlp_train.optim.build_optimizer",
        "description": "Six AdamW steps (decoupled decay on matrices only) from fixed gradients.",
    },
    "decay": {
        "id": "optim.decay_groups",
        "level": 1,
        "component": "mlp_train.optim.param_groups",
        "description": "Which parameters weight decay touches: steps from zero gradients move only those.",
    },
    "evaluate": {
        # evaluate runs whatever model it is given: the model is a dependency
        "uses": ["mlp_train.checkpoint.load_checkpoint", "mlp_train.model.MLPClassifier"],
        "id": "evaluate.metrics",
        "level": 2,
        "component": "mlp_train.evaluate.evaluate",
        "description": "Held-out loss and accuracy of the initial checkpoint.",
    },
    "train": {
        "id": "train.run",
        "level": 3,
        "component": "mlp_train.train.train",
        "timeout_s": 300,
        "description": "30 training steps without dropout: losses, learning rates, final weights, validation loss.",
        "compare": {
            "train_loss": "tensor",
            "lr": "tensor",
            "val_loss": "banded",
            "weights/*": "tensor",
        },
    },
}

N_STEPS = 6
# Several steps, so a learning rate that is zero at some step (a warmup slip) still moves what decays.
DECAY_STEPS = 3
TRAIN_STEPS = 30


def _raw(env):
    from safetensors.numpy import load_file

    return load_file(str(env.assets / "init.safetensors"))


def _torch_model(env, dropout=0.0):
    """The original's classifier, loaded by the original's load_checkpoint, in the working dtype."""
    import torch
    from mlp_train.checkpoint import load_checkpoint
    from mlp_train.config import ModelConfig
    from mlp_train.model import MLPClassifier

    model = load_checkpoint(MLPClassifier(ModelConfig(dropout=dropout)), str(env.assets / "init.safetensors"))
    return model.to(getattr(torch, env.dtype))


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def _np_state(tree):
    import numpy as np
    from mlp_train.checkpoint import to_state_dict

    return {k: np.asarray(v) for k, v in to_state_dict(tree).items()}


def reference_data(env):
    from mlp_train.config import TrainConfig
    from mlp_train.data import batch_stream, prepare_data

    train, val, norm = prepare_data(str(env.assets / "dataset.npz"), TrainConfig())
    stream = batch_stream(train, 32, 0)
    batches = [next(stream) for _ in range(3)]
    return {
        "train_x": train.x,
        "train_y": train.y,
        "val_x": val.x,
        "val_y": val.y,
        "batches": [{"x": x, "y": y} for x, y in batches],
    }


def candidate_data(env):
    return reference_data(env)


def reference_split(env):
    from mlp_train.config import TrainConfig
    from mlp_train.data import load_dataset, split_dataset

    cfg = TrainConfig()
    train, val = split_dataset(load_dataset(str(env.assets / "dataset.npz")), cfg.val_fraction, 7)
    return {"train_x": train.x, "train_y": train.y, "val_x": val.x, "val_y": val.y}


def candidate_split(env):
    return reference_split(env)


def inputs_epochs(env):
    # A dataset of its own, so the shuffle is probed apart from the split and the normalization.
    return {
        "x": env.rng.standard_normal((100, 16)).astype("float32"),
        "y": env.rng.integers(0, 4, 100).astype("int64"),
    }


def reference_epochs(env):
    from mlp_train.data import Dataset, iterate_batches

    train = Dataset(x=env.inputs["x"], y=env.inputs["y"])
    firsts = {}
    for seed in (0, 3):
        for epoch in range(3):
            x, y = next(iter(iterate_batches(train, 32, seed, epoch)))
            firsts[f"seed{seed}.epoch{epoch}"] = {"x": x, "y": y}
    return firsts


def candidate_epochs(env):
    return reference_epochs(env)


def inputs_grads(env):
    return {
        "x": env.rng.standard_normal((32, 16)).astype("float32"),
        "y": env.rng.integers(0, 4, 32).astype("int64"),
    }


def reference_grads(env):
    import torch
    from mlp_train.config import TrainConfig
    from mlp_train.losses import cross_entropy

    model = _torch_model(env).eval()
    loss = cross_entropy(
        model(_t(env, env.inputs["x"])),
        torch.from_numpy(env.inputs["y"]),
        TrainConfig().label_smoothing,
    )
    loss.backward()
    return {"loss": loss, "grads": {k: p.grad for k, p in model.named_parameters()}}


def candidate_grads(env):
    import jax
    from mlp_train.checkpoint import from_state_dict
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.train import loss_fn

    params = from_state_dict(_raw(env))
    loss, grads = jax.value_and_grad(loss_fn)(
        params,
        env.inputs["x"],
        env.inputs["y"],
        ModelConfig(dropout=0.0),
        TrainConfig(),
        train=False,
    )
    return {"loss": loss, "grads": _np_state(grads)}


def reference_schedule(env):
    from mlp_train.config import TrainConfig
    from mlp_train.optim import lr_at, lr_multiplier

    cfg = TrainConfig()
    steps = range(cfg.total_steps + 5)
    return {
        "multiplier": [lr_multiplier(s, cfg) for s in steps],
        "lr": [lr_at(s, cfg) for s in steps],
    }


def candidate_schedule(env):
    import numpy as np
    from mlp_train.config import TrainConfig
    from mlp_train.optim import lr_at, lr_multiplier

    cfg = TrainConfig()
    steps = range(cfg.total_steps + 5)
    return {
        "multiplier": [float(np.asarray(lr_multiplier(s, cfg))) for s in steps],
        "lr": [float(np.asarray(lr_at(s, cfg))) for s in steps],
    }


def inputs_steps(env):
    import numpy as np

    raw = _raw(env)
    grads = []
    for _ in range(N_STEPS):
        g = {k: env.rng.standard_normal(v.shape).astype("float32") for k, v in raw.items()}
        norm = float(np.sqrt(sum(float((x.astype("float64") ** 2).sum()) for x in g.values())))
        # Below the clipping norm, so clipping (wherever the candidate puts it) changes nothing.
        grads.append({k: (x * (0.5 / norm)).astype("float32") for k, x in g.items()})
    return {f"g{i}.{k}": v for i, g in enumerate(grads) for k, v in g.items()}


def reference_steps(env):

    from mlp_train.config import TrainConfig
    from mlp_train.optim import build_optimizer

    model = _torch_model(env)
    optimizer, scheduler = build_optimizer(model, TrainConfig())
    params = dict(model.named_parameters())
    for i in range(N_STEPS):
        for k, p in params.items():
            p.grad = _t(env, env.inputs[f"g{i}.{k}"])
        optimizer.step()
        scheduler.step()
    return {"params": {k: p.detach() for k, p in params.items()}}


def candidate_steps(env):
    import optax
    from mlp_train.checkpoint import from_state_dict
    from mlp_train.config import TrainConfig
    from mlp_train.optim import make_optimizer

    raw = _raw(env)
    params = from_state_dict(raw)
    optimizer = make_optimizer(TrainConfig())
    state = optimizer.init(params)
    for i in range(N_STEPS):
        grads = from_state_dict({k: env.inputs[f"g{i}.{k}"] for k in raw})
        updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return {"params": _np_state(params)}


def reference_decay(env):
    import torch
    from mlp_train.config import TrainConfig
    from mlp_train.optim import build_optimizer

    model = _torch_model(env)
    optimizer, scheduler = build_optimizer(model, TrainConfig())
    params = dict(model.named_parameters())
    before = {k: p.detach().clone() for k, p in params.items()}
    for _ in range(DECAY_STEPS):
        for p in params.values():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        scheduler.step()
    return {"decays": {k: bool((p.detach() != before[k]).any()) for k, p in params.items()}}


def candidate_decay(env):
    import numpy as np
    import optax
    from mlp_train.checkpoint import from_state_dict
    from mlp_train.config import TrainConfig
    from mlp_train.optim import make_optimizer

    raw = _raw(env)
    params = from_state_dict(raw)
    optimizer = make_optimizer(TrainConfig())
    zeros = from_state_dict({k: np.zeros_like(v) for k, v in raw.items()})
    state, moved = optimizer.init(params), params
    for _ in range(DECAY_STEPS):
        updates, state = optimizer.update(zeros, state, moved)
        moved = optax.apply_updates(moved, updates)
    before, after = _np_state(params), _np_state(moved)
    return {"decays": {k: bool((after[k] != before[k]).any()) for k in before}}


def reference_evaluate(env):
    from mlp_train.config import TrainConfig
    from mlp_train.data import prepare_data
    from mlp_train.evaluate import evaluate

    _, val, _ = prepare_data(str(env.assets / "dataset.npz"), TrainConfig())
    return evaluate(_torch_model(env, dropout=0.1), val)


def candidate_evaluate(env):
    from mlp_train.checkpoint import from_state_dict
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.data import prepare_data
    from mlp_train.evaluate import evaluate

    _, val, _ = prepare_data(str(env.assets / "dataset.npz"), TrainConfig())
    out = evaluate(from_state_dict(_raw(env)), val, ModelConfig())
    return {"loss": float(out["loss"]), "accuracy": float(out["accuracy"])}


def _read_run(out_dir):
    import json

    from safetensors.numpy import load_file

    metrics = json.loads((out_dir / "metrics.json").read_text())
    return {
        "train_loss": metrics["train_loss"],
        "lr": metrics["lr"],
        "val_loss": metrics["val_loss"],
        "weights": dict(load_file(str(out_dir / "final.safetensors"))),
    }


def reference_train(env):
    import torch
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.train import train

    if env.dtype == "float64":
        # The original feeds float32 numpy batches; in the calibration run they must follow the model.
        from_numpy = torch.from_numpy
        torch.from_numpy = lambda a: from_numpy(a).double() if a.dtype.kind == "f" else from_numpy(a)
    out = env.scratch / "run"
    train(
        str(env.assets / "dataset.npz"),
        str(env.assets / "init.safetensors"),
        str(out),
        ModelConfig(dropout=0.0),
        TrainConfig(),
        max_steps=TRAIN_STEPS,
    )
    return _read_run(out)


def candidate_train(env):
    from mlp_train.config import ModelConfig, TrainConfig
    from mlp_train.train import train

    out = env.scratch / "run"
    train(
        str(env.assets / "dataset.npz"),
        str(env.assets / "init.safetensors"),
        str(out),
        ModelConfig(dropout=0.0),
        TrainConfig(),
        max_steps=TRAIN_STEPS,
    )
    return _read_run(out)
