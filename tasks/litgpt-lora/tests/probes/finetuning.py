"""litgpt-lora: checkpoint reading, the loss, the schedule, gradients, optimizer steps, validation.

The reference side runs litgpt's own functions (`utils.load_checkpoint`, `chunked_cross_entropy`,
`get_lr_scheduler`, and `finetune/lora.py`'s `fit` and `validate` on a CPU Lightning Fabric, with
AdamW through `instantiate_torch_optimizer`) on the checkpoint with LoRA factors drawn here; both
sides get the same state dict as inputs. litgpt returns no gradients: `finetune.grads` reads them
from `fit`'s first step, in a hook the optimizer runs before it steps.
"""

PROBES = {
    "checkpoint": {
        "id": "utils.load_checkpoint",
        "level": 1,
        "component": "litgpt.utils.load_checkpoint",
        "uses": ["litgpt.utils.lazy_load"],
    },
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
        "mode": "train",
        "component": "litgpt.finetune.lora.fit",
        "uses": ["litgpt.lora.GPT", "litgpt.utils.chunked_cross_entropy"],
        "compare": {"loss": "scalar", "grads/*": "tensor"},
    },
    "steps": {
        "id": "finetune.steps",
        "level": 3,
        "mode": "train",
        # fit's steps as setup builds them (setup itself needs a data module and a checkpoint dir)
        "component": "litgpt.finetune.lora.fit",
        "uses": [
            "litgpt.finetune.lora.get_lr_scheduler",
            "litgpt.utils.instantiate_torch_optimizer",
            "litgpt.lora.mark_only_lora_as_trainable",
        ],
        "description": "fit's AdamW steps on the LoRA factors (warmup, then cosine) through the candidate's own fit: "
        "the losses and learning rates it logs, the validation loss after, the factors, the frozen base.",
        "compare": {"losses": "tensor", "learning_rate": "tensor", "val_loss": "scalar", "factors/*": "tensor",
                    "base_moved": "exact"},
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


def _candidate(env):
    from litgpt.lora import Config
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict

    config = Config.from_file(env.assets / "model_config.yaml", **_lora_values(env))
    return config, params_from_state_dict(_state(env), config)


def _data(env):
    import numpy as np

    return dict(np.load(env.assets / "finetune.npz"))


def _fabric(env, loggers=None):
    from lightning.fabric import Fabric

    precision = "64-true" if env.dtype == "float64" else "32-true"
    return Fabric(accelerator="cpu", devices=1, precision=precision, loggers=loggers)


def _loader(env, split):
    """The split's examples as litgpt's SFT data modules give them: in order, a micro-batch at a time."""
    import torch
    from torch.utils.data import DataLoader

    data = _data(env)
    ids, labels = data[f"{split}_input_ids"], data[f"{split}_labels"]
    examples = [{"input_ids": torch.from_numpy(i), "labels": torch.from_numpy(y),
                 "token_counts": {"raw": torch.tensor(int((y != -100).sum())),
                                  "raw_plus_prompt_template": torch.tensor(len(i))}}
                for i, y in zip(ids, labels, strict=True)]  # fmt: skip
    return DataLoader(examples, batch_size=TRAIN["micro_batch_size"], shuffle=False, drop_last=True)


def _fit(env, steps, before_step=None):
    """litgpt's own `fit` for `steps` optimizer steps, one per micro-batch, set up as its `main` sets it up.

    AdamW through `instantiate_torch_optimizer` and `get_lr_scheduler` over `TRAIN["max_steps"]`;
    no evaluation or sample inside the loop. In float64 the default dtype is float64 throughout, so
    that what litgpt accumulates in new tensors stays float64. `before_step(model)` runs before each
    optimizer step (the gradients are in place then).

    Returns:
        (the model, unwrapped; the losses and the learning rates `fit` logged, one of each per step).
    """
    import contextlib
    import io
    import tempfile
    from pathlib import Path

    import torch
    from litgpt.args import EvalArgs, TrainArgs
    from litgpt.finetune.lora import fit, get_lr_scheduler
    from litgpt.utils import instantiate_torch_optimizer
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    losses, rates = [], []

    class Logged:  # a Fabric logger: keeps the loss and learning rate of fit's per-iteration metrics
        name, version = "probe", 0

        def log_hyperparams(self, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            if "learning_rate" in metrics:
                losses.append(float(metrics["loss"]))
                rates.append(float(metrics["learning_rate"]))

    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, env.dtype))
    try:
        fabric = _fabric(env, loggers=[Logged()])
        model = _reference_model(env)
        optimizer = instantiate_torch_optimizer(
            {"class_path": "torch.optim.AdamW", "init_args": {"lr": TRAIN["learning_rate"], "betas": TRAIN["betas"],
                                                               "weight_decay": TRAIN["weight_decay"],
                                                               "eps": TRAIN["eps"]}},
            model.parameters(),
        )  # fmt: skip
        if before_step is not None:
            optimizer.register_step_pre_hook(lambda *_: before_step(model))
        wrapped, optimizer = fabric.setup_module(model), fabric.setup_optimizers(optimizer)
        scheduler = get_lr_scheduler(optimizer, warmup_steps=TRAIN["warmup_steps"], max_steps=TRAIN["max_steps"])
        train_loader, val_loader = fabric.setup_dataloaders(_loader(env, "train"), _loader(env, "val"))
        mb = TRAIN["micro_batch_size"]
        args = TrainArgs(save_interval=None, log_interval=1, global_batch_size=mb, micro_batch_size=mb,
                         lr_warmup_steps=TRAIN["warmup_steps"], epochs=10**6, max_steps=steps)  # fmt: skip
        evals = EvalArgs(interval=10**9, max_iters=len(val_loader), initial_validation=False)
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint_dir = Path(tmp) / "checkpoint"
            checkpoint_dir.mkdir()
            # fit builds a Tokenizer from the checkpoint directory; it is used only to generate samples
            Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(checkpoint_dir / "tokenizer.json"))
            with contextlib.redirect_stdout(io.StringIO()):  # fit prints a line per step
                fit(fabric=fabric, model=wrapped, optimizer=optimizer, scheduler=scheduler,
                    train_dataloader=train_loader, val_dataloader=val_loader, devices=1,
                    checkpoint_dir=checkpoint_dir, out_dir=Path(tmp) / "out", train=args, eval=evals,
                    data=None)  # fmt: skip
    finally:
        torch.set_default_dtype(previous)
    assert len(losses) == steps, losses
    return model, losses, rates


def reference_checkpoint(env):
    import yaml
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import load_checkpoint

    model = GPT(Config(**yaml.safe_load((env.assets / "model_config.yaml").read_text())))
    load_checkpoint(_fabric(env), model, env.assets / "lit_model.pth")
    return {"state": {k.replace(".", "_"): v for k, v in model.state_dict().items()}}


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
    grads = {}

    def keep(model):
        grads.update({n.replace(".", "_"): p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})

    _, losses, _ = _fit(env, 1, before_step=keep)
    return {"loss": losses[0], "grads": grads}


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
    model, losses, rates = _fit(env, TRAIN["max_steps"])
    after = model.state_dict()
    state = _state(env)
    moved = any(not (after[k].double().numpy() == state[k]).all() for k in state if "lora_" not in k)
    return {"losses": losses, "learning_rate": rates, "val_loss": _validated(env, model),
            "factors": {k.replace(".", "_"): v for k, v in after.items() if "lora_" in k},
            "base_moved": moved}  # fmt: skip


def candidate_steps(env):
    import numpy as np
    from litgpt.finetune.lora import TrainArgs, fit
    from litgpt.scripts.convert_lit_checkpoint import state_dict_from_params

    config, params = _candidate(env)
    params, metrics = fit(params, config, _data(env), TrainArgs(**TRAIN))
    after = state_dict_from_params(params)
    state = _state(env)
    moved = any(not np.array_equal(np.asarray(after[k]), state[k]) for k in state if "lora_" not in k)
    return {"losses": metrics["train_loss"], "learning_rate": metrics["learning_rate"],
            "val_loss": metrics["val_loss"],
            "factors": {k.replace(".", "_"): v for k, v in after.items() if "lora_" in k},
            "base_moved": moved}  # fmt: skip


def inputs_validate(env):
    return _state_inputs(env)


def _validated(env, model=None):
    """litgpt's `validate` of `model` (None: the checkpoint's, built here) over every validation micro-batch."""
    import torch
    from litgpt.args import EvalArgs
    from litgpt.finetune.lora import validate

    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, env.dtype))  # validate accumulates in a new tensor
    try:
        fabric = _fabric(env)
        model = _reference_model(env) if model is None else model  # built in the probe's dtype throughout
        loader = fabric.setup_dataloaders(_loader(env, "val"))
        return float(validate(fabric, fabric.setup_module(model), loader, EvalArgs(max_iters=len(loader)),
                              verbose=False))  # fmt: skip
    finally:
        torch.set_default_dtype(previous)


def reference_validate(env):
    return {"val_loss": _validated(env)}


def candidate_validate(env):
    from litgpt.finetune.lora import validate

    data = _data(env)
    config, params = _candidate(env)
    return {"val_loss": validate(params, config, data["val_input_ids"], data["val_labels"], TRAIN["micro_batch_size"])}
