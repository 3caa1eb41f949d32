"""litgpt-lora: checkpoint reading, the loss, the schedule, gradients, optimizer steps, validation.

The reference side runs litgpt's own pieces (`chunked_cross_entropy`, `get_lr_scheduler`, AdamW
through `instantiate_torch_optimizer`, the loss step of `finetune/lora.py`'s `fit`) on the
checkpoint with LoRA factors drawn here; both sides get the same state dict as inputs.
"""

PROBES = {
    "checkpoint": {"id": "utils.load_checkpoint", "level": 1, "component": "litgpt.utils.lazy_load"},
    "cross_entropy": {
        "id": "utils.chunked_cross_entropy",
        "level": 1,
        "component": "litgpt.utils.chunked_cross_entropy",
        "compare": {"chunked": "scalar", "listed": "scalar", "plain": "scalar"},
    },
    "schedule": {"id": "finetune.lr_schedule", "level": 1, "component": "litgpt.finetune.lora.get_lr_scheduler"},
    "grads": {
        "id": "finetune.grads",
        "level": 2,
        "component": "litgpt.finetune.lora.fit",
        "uses": ["litgpt.lora.GPT", "litgpt.utils.chunked_cross_entropy"],
        "compare": {"loss": "scalar", "grads/*": "tensor"},
    },
    "steps": {
        "id": "finetune.steps",
        "level": 3,
        "mode": "train",
        "component": "litgpt.finetune.lora.setup",
        "uses": [
            "litgpt.finetune.lora.fit",
            "litgpt.finetune.lora.get_lr_scheduler",
            "litgpt.lora.mark_only_lora_as_trainable",
        ],
        "description": "Six AdamW steps on the LoRA factors (warmup, then cosine): losses, factors, frozen base.",
        "compare": {"losses": "tensor", "factors/*": "tensor", "base_moved": "exact"},
        "timeout_s": 300,
    },
    "validate": {
        "id": "finetune.validate",
        "level": 2,
        "component": "litgpt.finetune.lora.validate",
        "uses": ["litgpt.lora.GPT", "litgpt.utils.chunked_cross_entropy"],
        "compare": {"val_loss": "scalar"},
    },
}
TRAIN = {"learning_rate": 2e-3, "weight_decay": 0.02, "betas": (0.9, 0.95), "eps": 1e-8, "warmup_steps": 2,
         "max_steps": 5, "micro_batch_size": 4}  # fmt: skip


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def _lora_values(env):
    import yaml

    return yaml.safe_load((env.assets / "lora.yaml").read_text())


def _state_inputs(env):
    """The checkpoint under litgpt.lora.GPT's names, LoRA factors drawn (B non-zero), and the data."""
    import numpy as np
    import torch
    import yaml
    from litgpt.lora import GPT, Config

    values = yaml.safe_load((env.assets / "model_config.yaml").read_text())
    model = GPT(Config(**values, **_lora_values(env)))
    model.load_state_dict(torch.load(env.assets / "lit_model.pth", weights_only=True), strict=False)
    state = {}
    for name, value in model.state_dict().items():
        value = value.numpy()
        if name.endswith("lora_A"):
            value = env.rng.uniform(-1, 1, value.shape) / np.sqrt(value.shape[1])
        elif name.endswith("lora_B"):
            value = env.rng.uniform(-0.05, 0.05, value.shape)
        state[f"sd.{name}"] = np.asarray(value, dtype="float32")
    return state


def _state(env):
    return {k[3:]: v for k, v in env.inputs.items() if k.startswith("sd.")}


def _reference_model(env):
    import torch
    import yaml
    from litgpt.lora import GPT, Config, mark_only_lora_as_trainable

    values = yaml.safe_load((env.assets / "model_config.yaml").read_text())
    model = GPT(Config(**values, **_lora_values(env)))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in _state(env).items()})
    model = model.to(getattr(torch, env.dtype))
    mark_only_lora_as_trainable(model)
    return model


def _reference_loss(model, ids, labels):
    import torch
    from litgpt.utils import chunked_cross_entropy

    logits = model(torch.from_numpy(ids), lm_head_chunk_size=128)
    logits[-1] = logits[-1][..., :-1, :]
    return chunked_cross_entropy(logits, torch.from_numpy(labels)[..., 1:])


def _candidate(env):
    from litgpt.lora import Config
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict

    config = Config.from_file(env.assets / "model_config.yaml", **_lora_values(env))
    return config, params_from_state_dict(_state(env), config)


def _data(env):
    import numpy as np

    return dict(np.load(env.assets / "finetune.npz"))


def reference_checkpoint(env):
    import torch

    return {
        "state": {
            k.replace(".", "_"): v for k, v in torch.load(env.assets / "lit_model.pth", weights_only=True).items()
        }
    }


def candidate_checkpoint(env):
    from litgpt.utils import load_checkpoint

    return {"state": {k.replace(".", "_"): v for k, v in load_checkpoint(env.assets / "lit_model.pth").items()}}


def inputs_cross_entropy(env):
    targets = env.rng.integers(0, 96, size=(2, 9)).astype("int64")
    targets[0, :4] = -100
    return {"logits": (2.0 * env.rng.standard_normal((2, 9, 96))).astype("float32"), "targets": targets}


def reference_cross_entropy(env):
    import torch
    from litgpt.utils import chunked_cross_entropy

    logits, targets = _t(env, env.inputs["logits"]), torch.from_numpy(env.inputs["targets"])
    return {"chunked": chunked_cross_entropy(logits, targets),
            "listed": chunked_cross_entropy(list(logits.split(4, dim=1)), targets),
            "plain": chunked_cross_entropy(logits, targets, chunk_size=0)}  # fmt: skip


def candidate_cross_entropy(env):
    import jax.numpy as jnp
    from litgpt.utils import chunked_cross_entropy

    logits, targets = jnp.asarray(env.inputs["logits"]), jnp.asarray(env.inputs["targets"])
    return {"chunked": chunked_cross_entropy(logits, targets),
            "listed": chunked_cross_entropy(list(jnp.split(logits, [4, 8], axis=1)), targets),
            "plain": chunked_cross_entropy(logits, targets, chunk_size=0)}  # fmt: skip


def reference_schedule(env):
    import torch
    from litgpt.finetune.lora import get_lr_scheduler

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=TRAIN["learning_rate"])
    scheduler = get_lr_scheduler(optimizer, warmup_steps=3, max_steps=11)
    rates = []
    for _ in range(11):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return {"lr": rates}


def candidate_schedule(env):
    from litgpt.finetune.lora import get_lr_scheduler

    schedule = get_lr_scheduler(TRAIN["learning_rate"], 3, 11)
    return {"lr": [float(schedule(i)) for i in range(11)]}


def inputs_grads(env):
    return _state_inputs(env)


def reference_grads(env):
    data, mb = _data(env), TRAIN["micro_batch_size"]
    model = _reference_model(env)
    loss = _reference_loss(model, data["train_input_ids"][:mb], data["train_labels"][:mb])
    loss.backward()
    grads = {n.replace(".", "_"): p.grad for n, p in model.named_parameters() if p.requires_grad}
    return {"loss": loss.detach(), "grads": grads}


def candidate_grads(env):
    import jax
    from litgpt.finetune.lora import loss_fn
    from litgpt.scripts.convert_lit_checkpoint import state_dict_from_params

    data, mb = _data(env), TRAIN["micro_batch_size"]
    config, params = _candidate(env)
    loss, grads = jax.value_and_grad(loss_fn)(params, config, data["train_input_ids"][:mb], data["train_labels"][:mb])
    flat = state_dict_from_params(grads)
    return {"loss": loss, "grads": {k.replace(".", "_"): v for k, v in flat.items() if "lora_" in k}}


def inputs_steps(env):
    return _state_inputs(env)


def reference_steps(env):
    from litgpt.finetune.lora import get_lr_scheduler
    from litgpt.utils import instantiate_torch_optimizer

    data, mb = _data(env), TRAIN["micro_batch_size"]
    model = _reference_model(env)
    optimizer = instantiate_torch_optimizer(
        {"class_path": "torch.optim.AdamW", "init_args": {"lr": TRAIN["learning_rate"], "betas": TRAIN["betas"],
                                                           "weight_decay": TRAIN["weight_decay"], "eps": TRAIN["eps"]}},
        [p for p in model.parameters() if p.requires_grad],
    )  # fmt: skip
    scheduler = get_lr_scheduler(optimizer, warmup_steps=TRAIN["warmup_steps"], max_steps=TRAIN["max_steps"])
    losses = []
    for i in range(TRAIN["max_steps"]):
        rows = slice(i * mb, (i + 1) * mb)
        loss = _reference_loss(model, data["train_input_ids"][rows], data["train_labels"][rows])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        losses.append(float(loss))
    after = model.state_dict()
    state = _state(env)
    moved = any(not (after[k].double().numpy() == state[k]).all() for k in state if "lora_" not in k)
    return {"losses": losses, "factors": {k.replace(".", "_"): v for k, v in after.items() if "lora_" in k},
            "base_moved": moved}  # fmt: skip


def candidate_steps(env):
    import numpy as np
    from litgpt.finetune.lora import TrainArgs, make_optimizer, make_train_step
    from litgpt.scripts.convert_lit_checkpoint import state_dict_from_params

    data, mb = _data(env), TRAIN["micro_batch_size"]
    config, params = _candidate(env)
    args = TrainArgs(**TRAIN)
    optimizer = make_optimizer(params, args)
    opt_state = optimizer.init(params)
    step = make_train_step(config, optimizer)
    losses = []
    for i in range(TRAIN["max_steps"]):
        rows = slice(i * mb, (i + 1) * mb)
        params, opt_state, loss = step(params, opt_state, data["train_input_ids"][rows], data["train_labels"][rows])
        losses.append(float(loss))
    after = state_dict_from_params(params)
    state = _state(env)
    moved = any(not np.array_equal(np.asarray(after[k]), state[k]) for k in state if "lora_" not in k)
    return {"losses": losses, "factors": {k.replace(".", "_"): v for k, v in after.items() if "lora_" in k},
            "base_moved": moved}  # fmt: skip


def inputs_validate(env):
    return _state_inputs(env)


def reference_validate(env):
    import torch

    data, mb = _data(env), TRAIN["micro_batch_size"]
    model = _reference_model(env)
    losses = []
    with torch.no_grad():
        for i in range(len(data["val_input_ids"]) // mb):
            rows = slice(i * mb, (i + 1) * mb)
            losses.append(float(_reference_loss(model, data["val_input_ids"][rows], data["val_labels"][rows])))
    return {"val_loss": sum(losses) / len(losses)}


def candidate_validate(env):
    from litgpt.finetune.lora import validate

    data = _data(env)
    config, params = _candidate(env)
    return {"val_loss": validate(params, config, data["val_input_ids"], data["val_labels"], TRAIN["micro_batch_size"])}
