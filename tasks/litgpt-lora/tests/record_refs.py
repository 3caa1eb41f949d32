"""Record litgpt-lora's inputs and frozen references from the original (litgpt 0.5.13), with torch.

Run by task authors (never by the grader), with the original laid out by `twin task fetch`:

    LITGPT_SOURCE=<the laid-out original> python tests/record_refs.py [--check]

With `--check` it writes nothing: it records every reference again in memory, from litgpt in
the current environment, and prints one `drifted:` line per frozen quantity it no longer
gives within its own noise (exit 1), as `twin task check` runs it (`reference_check` in
task.toml).

Every reference is computed by litgpt's own code (`litgpt.model.GPT`, `litgpt.lora.GPT`,
`merge_lora_weights`, `mark_only_lora_as_trainable`, `chunked_cross_entropy`,
`finetune.lora.get_lr_scheduler`, and the fine-tuning loop `finetune.lora.fit` itself on a CPU
Lightning Fabric, with AdamW through `instantiate_torch_optimizer` and `finetune.lora.validate`)
in float32 on CPU, and again in float64: the two runs' disagreement is each output's noise
floor, from which the grader takes its tolerance. The one stand-in, the gradients of one
micro-batch (litgpt returns none), is `fit`'s own loss lines, checked against the loss `fit`
logs. docs/tasks.md lists which function of litgpt produced each reference. Writes
tests/inputs/{inputs.npz,params.json} and tests/refs/{refs.npz,refs.json,VERSIONS.json}.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

TASK = Path(__file__).resolve().parents[1]
ASSETS = Path(os.environ.get("ASSETS_DIR") or TASK / "environment" / "assets")  # where the task's assets are
TESTS = TASK / "tests"
sys.path.insert(0, os.environ.get("LITGPT_SOURCE") or os.environ["ORIGINAL_DIR"])  # ORIGINAL_DIR: as twin says

import litgpt.finetune.lora as finetune  # noqa: E402
import litgpt.lora as lora  # noqa: E402
import torch  # noqa: E402
from lightning.fabric import Fabric  # noqa: E402
from lightning.fabric.loggers import Logger  # noqa: E402
from litgpt.args import EvalArgs, TrainArgs  # noqa: E402
from litgpt.config import Config as BaseConfig  # noqa: E402
from litgpt.finetune.lora import get_lr_scheduler  # noqa: E402
from litgpt.model import GPT as BaseGPT  # noqa: E402
from litgpt.model import RMSNorm, apply_rope, build_rope_cache  # noqa: E402
from litgpt.utils import chunked_cross_entropy, instantiate_torch_optimizer  # noqa: E402
from tokenizers import Tokenizer as WordLevelTokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

SEED = 7
SHAPES = [(1, 8), (2, 16), (3, 24)]
TRAIN = {"learning_rate": 2e-3, "weight_decay": 0.02, "betas": [0.9, 0.95], "eps": 1e-8,
         "warmup_steps": 4, "max_steps": 24, "micro_batch_size": 4}  # fmt: skip
INIT_SEEDS = range(30)
BAND_STDS = 3.0
STEPS = 6  # the optimizer probe: the first steps of the same run (warmup and the turn into cosine)
LORA = yaml.safe_load((ASSETS / "lora.yaml").read_text())


def config(dtype_name: str = "float32") -> lora.Config:
    values = yaml.safe_load((ASSETS / "model_config.yaml").read_text())
    return lora.Config(**values, **LORA)


def lora_model(state: dict[str, torch.Tensor], dtype: torch.dtype) -> lora.GPT:
    model = lora.GPT(config())
    model.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return model.to(dtype)


def lora_state(rng: np.random.Generator, base: dict[str, torch.Tensor], b_scale: float) -> dict[str, torch.Tensor]:
    """The LoRA model's full state: the checkpoint plus seeded A and B (B non-zero, so LoRA shows)."""
    model = lora.GPT(config())
    model.load_state_dict(base, strict=False)
    state = {}
    for name, value in model.state_dict().items():
        if "lora_" in name:
            bound = 1.0 / np.sqrt(value.shape[1]) if name.endswith("lora_A") else b_scale
            value = torch.from_numpy(rng.uniform(-bound, bound, size=tuple(value.shape)).astype(np.float32))
        state[name] = value.clone()
    return state


def tensors(**named) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in named.items()}


def record(dtype: torch.dtype, state, inputs, data) -> tuple[dict[str, np.ndarray], dict]:
    """Every reference output at `dtype` (the float64 run is the noise floor of the float32 one)."""
    out: dict[str, np.ndarray] = {}
    values: dict = {}
    f = lambda a: torch.from_numpy(a).to(dtype)  # noqa: E731
    cos, sin = build_rope_cache(16, 12, base=10000)
    cos2, sin2 = build_rope_cache(10, 8, base=500)
    out["rope.cos"], out["rope.sin"], out["rope.cos_b500"], out["rope.sin_b500"] = (
        t.numpy() for t in (cos, sin, cos2, sin2))
    x = f(inputs["rope_x"])
    out["rope.apply"] = apply_rope(x, cos2.to(dtype).unsqueeze(0), sin2.to(dtype).unsqueeze(0)).numpy()
    norm = RMSNorm(48, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(f(inputs["rms_w"]))
    out["rms_norm"] = norm(f(inputs["rms_x"])).detach().numpy()
    logits, targets = f(inputs["ce_logits"]), torch.from_numpy(inputs["ce_targets"])
    values["ce.chunked"] = float(chunked_cross_entropy(logits, targets))
    values["ce.chunked_list"] = float(chunked_cross_entropy(list(logits.split(3, dim=1)), targets))
    values["ce.plain"] = float(chunked_cross_entropy(logits, targets, chunk_size=0))

    base_state = {k.replace(".linear.", "."): v for k, v in state.items() if "lora_" not in k}
    base = BaseGPT(BaseConfig(**yaml.safe_load((ASSETS / "model_config.yaml").read_text())))
    base.load_state_dict(base_state, strict=True)
    base = base.to(dtype)
    model = lora_model(state, dtype)
    with torch.no_grad():
        for i in range(len(SHAPES)):
            idx = torch.from_numpy(inputs[f"idx.{i}"])
            out[f"forward.base.{i}"] = base(idx).numpy()
            out[f"forward.lora.{i}"] = model(idx).numpy()
    merged = lora_model(state, dtype)
    lora.merge_lora_weights(merged)
    with torch.no_grad():
        for i in range(len(SHAPES)):
            out[f"forward.merged.{i}"] = merged(torch.from_numpy(inputs[f"idx.{i}"])).numpy()
    for name, value in merged.state_dict().items():
        if name.endswith("linear.weight"):
            out[f"merge.{name}"] = value.numpy()

    model = lora_model(state, dtype)
    lora.mark_only_lora_as_trainable(model)
    values["trainable"] = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    # litgpt exposes no gradients: these three lines are `fit`'s own loss of one micro-batch, and the
    # loss they give must be the one `fit` logs for its first step on the same batch (checked below)
    first = next(iter(loader(data, "train")))
    ids, labels = first["input_ids"], first["labels"]
    logits = model(ids, lm_head_chunk_size=128)
    logits[-1] = logits[-1][..., :-1, :]
    loss = chunked_cross_entropy(logits, labels[..., 1:])
    loss.backward()
    values["loss.value"] = float(loss)
    for name, p in model.named_parameters():
        if p.requires_grad:
            out[f"grads.{name}"] = p.grad.numpy()

    # the first STEPS steps of the fine-tuning run (its schedule still spans TRAIN["max_steps"])
    trained, series, _ = fit(state, dtype, data, STEPS)
    values["steps.loss"], values["steps.lr"] = series["loss"], series["lr"]
    if not np.isclose(values["loss.value"], series["loss"][0], rtol=1e-6, atol=0.0):
        raise SystemExit(f"the one-batch loss {values['loss.value']} is not fit's first {series['loss'][0]}")
    out.update({f"steps.{k}": v for k, v in trained.items() if "lora_" in k})
    values["steps.base_unchanged"] = all(
        np.array_equal(trained[k], state[k].to(dtype).numpy()) for k in state if "lora_" not in k)
    return out, values


class MetricsLog(Logger):
    """A Fabric logger that keeps the metrics litgpt's `fit` logs each iteration (no files written)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    @property
    def name(self) -> str:
        return "record_refs"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        if "learning_rate" in metrics:  # fit's per-iteration dict, not ThroughputMonitor's
            self.rows.append(dict(metrics))


def loader(data: dict[str, np.ndarray], split: str) -> DataLoader:
    """The split's examples as litgpt's SFT data modules give them: in order, `micro_batch_size` at a time."""
    ids, labels = data[f"{split}_input_ids"], data[f"{split}_labels"]
    examples = [{"input_ids": torch.from_numpy(i), "labels": torch.from_numpy(y),
                 "token_counts": {"raw": torch.tensor(int((y != -100).sum())),
                                  "raw_plus_prompt_template": torch.tensor(len(i))}}
                for i, y in zip(ids, labels, strict=True)]  # fmt: skip
    return DataLoader(examples, batch_size=TRAIN["micro_batch_size"], shuffle=False, drop_last=True)


def fit(state, dtype, data, steps):
    """litgpt's own `finetune.lora.fit` on CPU Fabric, set up as litgpt's `main` sets it up.

    The model, optimizer (AdamW through `instantiate_torch_optimizer`, over every parameter as
    `main` passes them) and scheduler (`get_lr_scheduler` over `TRAIN["max_steps"]`) go through
    Fabric; `fit` runs `steps` optimizer steps, one per micro-batch, and the metrics it logs each
    step are kept. Then litgpt's `validate` over the whole validation set, as `main`'s final
    evaluation. In float64 the default dtype is float64 throughout, so that the losses litgpt
    accumulates in new tensors (`RunningMean`, `validate`'s `torch.zeros`) stay float64.

    Returns:
        (the trained state dict as numpy, {"loss": [...], "lr": [...]} as `fit` logged them, val loss).
    """
    log = MetricsLog()
    fabric = Fabric(accelerator="cpu", devices=1, precision="64-true" if dtype == torch.float64 else "32-true",
                    loggers=[log])  # fmt: skip
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = lora_model(state, dtype)
        lora.mark_only_lora_as_trainable(model)
        model = fabric.setup_module(model)
        optimizer = instantiate_torch_optimizer(
            {"class_path": "torch.optim.AdamW", "init_args": {
                "lr": TRAIN["learning_rate"], "weight_decay": TRAIN["weight_decay"], "betas": tuple(TRAIN["betas"]),
                "eps": TRAIN["eps"]}}, model.parameters())  # fmt: skip
        optimizer = fabric.setup_optimizers(optimizer)
        scheduler = get_lr_scheduler(optimizer, warmup_steps=TRAIN["warmup_steps"], max_steps=TRAIN["max_steps"])
        train_loader, val_loader = fabric.setup_dataloaders(loader(data, "train"), loader(data, "val"))
        args = TrainArgs(save_interval=None, log_interval=1, global_batch_size=TRAIN["micro_batch_size"],
                         micro_batch_size=TRAIN["micro_batch_size"], lr_warmup_steps=TRAIN["warmup_steps"],
                         epochs=10**6, max_steps=steps)  # fmt: skip
        # no evaluation or sample generation inside the loop (its interval is never reached)
        evals = EvalArgs(interval=10**9, max_iters=len(val_loader), initial_validation=False)
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint_dir = Path(tmp) / "checkpoint"
            checkpoint_dir.mkdir()
            # `fit` builds a Tokenizer from the checkpoint directory; it is used only to generate samples
            WordLevelTokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(checkpoint_dir / "tokenizer.json"))
            with contextlib.redirect_stdout(io.StringIO()):  # fit prints a line per step
                finetune.fit(fabric=fabric, model=model, optimizer=optimizer, scheduler=scheduler,
                             train_dataloader=train_loader, val_dataloader=val_loader, devices=1,
                             checkpoint_dir=checkpoint_dir, out_dir=Path(tmp) / "out", train=args, eval=evals,
                             data=None)  # fmt: skip
        val_loss = float(finetune.validate(fabric, model, val_loader, evals, verbose=False))
    finally:
        torch.set_default_dtype(previous)
    assert [row["step"] for row in log.rows] == list(range(1, steps + 1)), log.rows
    series = {"loss": [float(row["loss"]) for row in log.rows], "lr": [float(row["learning_rate"]) for row in log.rows]}
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, series, val_loss


def schedule_rates(steps: int) -> list[float]:
    """The rate `get_lr_scheduler` gives optimizer step i (from 0): the optimizer's rate before step i."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=TRAIN["learning_rate"])
    scheduler = get_lr_scheduler(optimizer, warmup_steps=TRAIN["warmup_steps"], max_steps=TRAIN["max_steps"])
    rates = []
    for _ in range(steps):
        rates.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return rates


def init_spread(seed: int) -> float:
    """The std of every LoRA A of a fresh `litgpt.lora.GPT`, each scaled by sqrt(in_features)."""
    torch.manual_seed(seed)
    model = lora.GPT(config())
    scaled = [p.detach().numpy().ravel() * np.sqrt(p.shape[1])
              for n, p in model.named_parameters() if n.endswith("lora_A")]  # fmt: skip
    return float(np.concatenate(scaled).std())


def compute() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    """The inputs, the reference arrays (float32 and their `f64.` twins) and the reference values."""
    rng = np.random.default_rng(SEED)
    checkpoint = torch.load(ASSETS / "lit_model.pth", weights_only=True)
    state = lora_state(rng, checkpoint, b_scale=0.05)
    fit_init = lora_state(rng, checkpoint, b_scale=0.0)  # litgpt's own start: B zero
    inputs = {f"sd.{k}": v.numpy() for k, v in state.items()}
    inputs.update({f"fit_init.{k}": v.numpy() for k, v in fit_init.items() if "lora_" in k})
    for i, (b, t) in enumerate(SHAPES):
        inputs[f"idx.{i}"] = rng.integers(0, 80, size=(b, t)).astype(np.int64)
    inputs["rope_x"] = rng.standard_normal((2, 4, 10, 8)).astype(np.float32)
    inputs["rms_x"] = (3.0 * rng.standard_normal((3, 5, 48))).astype(np.float32)
    inputs["rms_w"] = rng.uniform(0.5, 1.5, size=48).astype(np.float32)
    inputs["ce_logits"] = (2.0 * rng.standard_normal((2, 7, 96))).astype(np.float32)
    targets = rng.integers(0, 96, size=(2, 7)).astype(np.int64)
    targets[0, :3] = -100
    inputs["ce_targets"] = targets
    data = dict(np.load(ASSETS / "finetune.npz"))
    refs, values = record(torch.float32, state, inputs, data)
    noise, noise_values = record(torch.float64, state, inputs, data)
    refs.update({f"f64.{k}": v for k, v in noise.items()})
    values["f64"] = {k: v for k, v in noise_values.items() if k != "trainable"}

    fit_state = {**state, **fit_init}
    trained, series, val_loss = fit(fit_state, torch.float32, data, TRAIN["max_steps"])
    trained64, series64, val_loss64 = fit(fit_state, torch.float64, data, TRAIN["max_steps"])
    values["fit.train_loss"], values["fit.lr"], values["fit.val_loss"] = series["loss"], series["lr"], val_loss
    values["f64"]["fit.train_loss"], values["f64"]["fit.val_loss"] = series64["loss"], val_loss64
    values["schedule.lr"] = schedule_rates(TRAIN["max_steps"])
    refs.update({f"fit.{k}": v for k, v in trained.items() if "lora_" in k})
    refs.update({f"f64.fit.{k}": v for k, v in trained64.items() if "lora_" in k})
    values["checkpoint.names"] = sorted(checkpoint)
    spreads = [init_spread(seed) for seed in INIT_SEEDS]  # litgpt's own kaiming-uniform draws, seed to seed
    values["init.std_mean"] = float(np.mean(spreads))
    values["init.std_band"] = float(BAND_STDS * np.std(spreads))
    refs.update({f"load.{k}": v.numpy() for k, v in checkpoint.items()})
    return inputs, refs, values


def check_frozen(inputs: dict[str, np.ndarray], refs: dict[str, np.ndarray], values: dict) -> list[str]:
    """One line per frozen input or reference that litgpt, run now, no longer gives (`drift.py`)."""
    sys.path.insert(0, str(TESTS))
    import drift

    frozen_inputs = dict(np.load(TESTS / "inputs" / "inputs.npz"))
    same = lambda k: k in inputs and k in frozen_inputs and np.array_equal(inputs[k], frozen_inputs[k])  # noqa: E731
    lines = [f"input {k}: differs" for k in sorted(set(inputs) | set(frozen_inputs)) if not same(k)]
    frozen = dict(np.load(TESTS / "refs" / "refs.npz"))
    return lines + drift.check(frozen, json.loads((TESTS / "refs" / "refs.json").read_text()), refs, values)


def main(argv: list[str]) -> int:
    """Record the references; with `--check`, record them in memory and compare them with the frozen ones."""
    inputs, refs, values = compute()
    if argv == ["--check"]:
        lines = check_frozen(inputs, refs, values)
        for line in lines:
            print(f"drifted: {line}")
        if not lines:
            print(f"the frozen references are litgpt's outputs now: {len(refs)} arrays, {len(values)} values")
        return 1 if lines else 0
    if argv:
        print("usage: record_refs.py [--check]", file=sys.stderr)
        return 2
    (TESTS / "inputs").mkdir(exist_ok=True)
    (TESTS / "refs").mkdir(exist_ok=True)
    np.savez_compressed(TESTS / "inputs" / "inputs.npz", **inputs)
    (TESTS / "inputs" / "params.json").write_text(json.dumps({"train": TRAIN, "steps": STEPS, "lora": LORA,
                                                               "shapes": SHAPES}, indent=1))  # fmt: skip
    np.savez_compressed(TESTS / "refs" / "refs.npz", **refs)
    (TESTS / "refs" / "refs.json").write_text(json.dumps(values, indent=1))
    import litgpt

    versions = {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
                "litgpt": getattr(litgpt, "__version__", "0.5.13")}  # fmt: skip
    (TESTS / "refs" / "VERSIONS.json").write_text(json.dumps(versions, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
