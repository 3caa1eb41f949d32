"""Record litgpt-lora's inputs and frozen references from the original (litgpt 0.5.13), with torch.

Run by task authors (never by the grader), with the original laid out by `twin task fetch`:

    LITGPT_SOURCE=<the laid-out original> python tests/record_refs.py

Every reference is computed by litgpt's own code (`litgpt.model.GPT`, `litgpt.lora.GPT`,
`merge_lora_weights`, `mark_only_lora_as_trainable`, `chunked_cross_entropy`,
`finetune.lora.get_lr_scheduler`, AdamW through `instantiate_torch_optimizer`) in float32 on
CPU, and again in float64: the two runs' disagreement is each output's noise floor, from which
the grader takes its tolerance. Writes tests/inputs/{inputs.npz,params.json} and
tests/refs/{refs.npz,refs.json,VERSIONS.json}.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
import yaml

TASK = Path(__file__).resolve().parents[1]
ASSETS = TASK / "environment" / "assets"
TESTS = TASK / "tests"
sys.path.insert(0, os.environ["LITGPT_SOURCE"])

import torch  # noqa: E402

import litgpt.lora as lora  # noqa: E402
from litgpt.config import Config as BaseConfig  # noqa: E402
from litgpt.finetune.lora import get_lr_scheduler  # noqa: E402
from litgpt.model import GPT as BaseGPT  # noqa: E402
from litgpt.model import RMSNorm, apply_rope, build_rope_cache  # noqa: E402
from litgpt.utils import chunked_cross_entropy, instantiate_torch_optimizer  # noqa: E402

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


def record(dtype: torch.dtype, state, inputs, batches) -> tuple[dict[str, np.ndarray], dict]:
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
    ids, labels = batches[0]
    logits = model(ids, lm_head_chunk_size=128)
    logits[-1] = logits[-1][..., :-1, :]
    loss = chunked_cross_entropy(logits, labels[..., 1:])
    loss.backward()
    values["loss.value"] = float(loss)
    for name, p in model.named_parameters():
        if p.requires_grad:
            out[f"grads.{name}"] = p.grad.numpy()

    trained, series = train(state, dtype, batches, STEPS)
    values["steps.loss"], values["steps.lr"] = series["loss"], series["lr"]
    out.update({f"steps.{k}": v for k, v in trained.items() if "lora_" in k})
    values["steps.base_unchanged"] = all(
        np.array_equal(trained[k], state[k].to(dtype).numpy()) for k in state if "lora_" not in k)
    return out, values


def train(state, dtype, batches, steps):
    """litgpt's fit loop, one optimizer step per micro-batch: AdamW on LoRA only, warmup then cosine."""
    model = lora_model(state, dtype)
    lora.mark_only_lora_as_trainable(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = instantiate_torch_optimizer(
        {"class_path": "torch.optim.AdamW", "init_args": {
            "lr": TRAIN["learning_rate"], "weight_decay": TRAIN["weight_decay"], "betas": tuple(TRAIN["betas"]),
            "eps": TRAIN["eps"]}}, trainable)  # fmt: skip
    scheduler = get_lr_scheduler(optimizer, warmup_steps=TRAIN["warmup_steps"], max_steps=TRAIN["max_steps"])
    series = {"loss": [], "lr": []}
    for step in range(steps):
        ids, labels = batches[step % len(batches)]
        series["lr"].append(float(optimizer.param_groups[0]["lr"]))
        logits = model(ids, lm_head_chunk_size=128)
        logits[-1] = logits[-1][..., :-1, :]
        loss = chunked_cross_entropy(logits, labels[..., 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        series["loss"].append(float(loss))
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}, series


def init_spread(seed: int) -> float:
    """The std of every LoRA A of a fresh `litgpt.lora.GPT`, each scaled by sqrt(in_features)."""
    torch.manual_seed(seed)
    model = lora.GPT(config())
    scaled = [p.detach().numpy().ravel() * np.sqrt(p.shape[1]) for n, p in model.named_parameters() if n.endswith("lora_A")]
    return float(np.concatenate(scaled).std())


def validate(state, dtype, data) -> float:
    model = lora_model(state, dtype)
    losses = []
    mb = TRAIN["micro_batch_size"]
    with torch.no_grad():
        for i in range(len(data["val_input_ids"]) // mb):
            ids = torch.from_numpy(data["val_input_ids"][i * mb : (i + 1) * mb])
            labels = torch.from_numpy(data["val_labels"][i * mb : (i + 1) * mb])
            logits = model(ids, lm_head_chunk_size=128)
            logits[-1] = logits[-1][..., :-1, :]
            losses.append(float(chunked_cross_entropy(logits, labels[..., 1:])))
    return float(np.mean(losses))


def main() -> None:
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
    mb = TRAIN["micro_batch_size"]
    batches = [(torch.from_numpy(data["train_input_ids"][i * mb : (i + 1) * mb]),
                torch.from_numpy(data["train_labels"][i * mb : (i + 1) * mb]))
               for i in range(len(data["train_input_ids"]) // mb)]  # fmt: skip

    refs, values = record(torch.float32, state, inputs, batches)
    noise, noise_values = record(torch.float64, state, inputs, batches)
    refs.update({f"f64.{k}": v for k, v in noise.items()})
    values["f64"] = {k: v for k, v in noise_values.items() if k != "trainable"}

    fit_state = {**state, **fit_init}
    trained, series = train(fit_state, torch.float32, batches, TRAIN["max_steps"])
    trained64, series64 = train(fit_state, torch.float64, batches, TRAIN["max_steps"])
    values["fit.train_loss"], values["fit.lr"] = series["loss"], series["lr"]
    values["f64"]["fit.train_loss"] = series64["loss"]
    refs.update({f"fit.{k}": v for k, v in trained.items() if "lora_" in k})
    refs.update({f"f64.fit.{k}": v for k, v in trained64.items() if "lora_" in k})
    values["fit.val_loss"] = validate({k: torch.from_numpy(v) for k, v in trained.items()}, torch.float32, data)
    values["f64"]["fit.val_loss"] = validate({k: torch.from_numpy(v) for k, v in trained64.items()}, torch.float64, data)
    values["checkpoint.names"] = sorted(checkpoint)
    spreads = [init_spread(seed) for seed in INIT_SEEDS]  # litgpt's own kaiming-uniform draws, seed to seed
    values["init.std_mean"] = float(np.mean(spreads))
    values["init.std_band"] = float(BAND_STDS * np.std(spreads))
    refs.update({f"load.{k}": v.numpy() for k, v in checkpoint.items()})

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


if __name__ == "__main__":
    main()
