"""The llama-lora-sft grader: runs the candidate torch-free and offline, scores it, writes reward.json.

Self-contained (numpy + this directory). Paths come from the environment:
TESTS_DIR (/tests), APP_DIR (/app), ASSETS_DIR (/assets), LOGS_DIR (/logs/verifier).

Levels (002 §C.4): L0 spec gate (independence, module layout, public interface, converted
parameter tree, adapter tree); L1 tokenizer, chat template, label masking, batching, schedule,
RMSNorm, rotary tables and rotation, attention, SwiGLU, LoRA linear and initialisation; L2
checkpoint conversion and adapter files; L3 composed forward (base and adapted) over three
shapes; L4 masked loss, LoRA gradients and a six-step AdamW trajectory with frozen base; L5 the
real training entry point under a time budget (loss curve, trained adapter); L6 held-out
validation loss from a fixed adapter and from the candidate's own initialisation, banded by the
original's own spread.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drivers  # noqa: E402
from grading import (  # noqa: E402
    Check,
    banded_scalar_similarity,
    distributional_similarity,
    exact_agreement,
    mean_score,
    nested_sandbox_ready,
    run_candidate,
    scalar_similarity,
    scan_forbidden_imports,
    spec_gated_reward,
    tensor_similarity,
    write_reward,
)

FORBIDDEN = ["torch"]
# End-to-end budget: this many times the CPU seconds the original's entry point needs (CPU
# time, unlike wall time, is not inflated when the recording machine is shared) ...
BUDGET_FACTOR = 6.0
BUDGET_FLOOR_S = 120.0  # ... but never less (JAX compiles on first call; machines differ)
PROBES_TIMEOUT_S = 480.0  # inside the 600 s verifier limit even on a heavily shared machine
# The base model (no adapter) is probed at fewer shapes than the adapted one: each shape
# costs a compilation, and the adapted path runs through the same code plus the adapter.
BASE_CASES = {"attn": [1], "mlp": [0], "forward": [0, 2]}

MODULES = [
    "llama_sft/__init__.py", "llama_sft/config.py", "llama_sft/tokenizer.py", "llama_sft/template.py",
    "llama_sft/data.py", "llama_sft/modeling/__init__.py", "llama_sft/modeling/norm.py",
    "llama_sft/modeling/rotary.py", "llama_sft/modeling/attention.py", "llama_sft/modeling/mlp.py",
    "llama_sft/modeling/llama.py", "llama_sft/lora.py", "llama_sft/checkpoint.py", "llama_sft/loss.py",
    "llama_sft/optim.py", "llama_sft/evaluate.py", "llama_sft/train.py",
]
INTERFACE = {
    "llama_sft.config": ["ModelConfig", "LoraConfig", "TrainConfig", "load_model_config", "load_train_config"],
    "llama_sft.tokenizer": ["ByteTokenizer"],
    "llama_sft.template": ["prompt_ids", "response_ids", "render"],
    "llama_sft.data": ["IGNORE_INDEX", "load_jsonl", "stable_permutation", "split_train_val",
                       "encode_example", "collate", "batch_schedule"],
    "llama_sft.modeling.norm": ["rms_norm"],
    "llama_sft.modeling.rotary": ["rope_cos_sin", "apply_rotary"],
    "llama_sft.modeling.attention": ["repeat_kv", "attention"],
    "llama_sft.modeling.mlp": ["swiglu"],
    "llama_sft.modeling.llama": ["forward"],
    "llama_sft.lora": ["init_lora", "lora_linear"],
    "llama_sft.checkpoint": ["convert_checkpoint", "load_checkpoint", "save_adapter", "load_adapter"],
    "llama_sft.loss": ["token_nll", "sft_loss"],
    "llama_sft.optim": ["lr_schedule", "make_optimizer"],
    "llama_sft.evaluate": ["validation_loss"],
    "llama_sft.train": ["TrainState", "create_train_state", "make_train_step", "train", "main"],
}


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name, default))


def _keys(refs: dict, prefix: str) -> list[str]:
    return sorted(k for k in refs if k.startswith(prefix))


def _tensors(refs: dict, outs: dict, keys: list[str]) -> float:
    return mean_score(tensor_similarity(outs[k], refs[k]) if k in outs else 0.0 for k in keys)


def _lists(cand, ref) -> float:
    """Exact agreement of two lists of sequences, element by element (a missing one scores 0)."""
    if not isinstance(cand, list) or len(cand) != len(ref):
        return 0.0
    return mean_score(exact_agreement(np.asarray(c, dtype=object), np.asarray(r, dtype=object))
                      for c, r in zip(cand, ref))


def _series(cand, ref) -> float:
    """Per-step scalar similarity of two equally long series."""
    if not isinstance(cand, list) or len(cand) != len(ref):
        return 0.0
    return mean_score(scalar_similarity(c, r) for c, r in zip(cand, ref))


def _forbidden_missing(run) -> bool:
    """A section failed because a forbidden package could not be imported (runtime leak)."""
    return any(f"No module named '{name}" in tb for tb in run.errors.values() for name in FORBIDDEN)


def _init_score(outs: dict, refs: dict, values: dict) -> tuple[float, str]:
    """LoRA initialisation: B exactly zero, A inside U(-1/sqrt(in), 1/sqrt(in)) with the spread
    of the original's kaiming-uniform draws (banded by its own seed-to-seed variation)."""
    a_keys = [k.replace("adapter_io.load.", "init.") for k in _keys(refs, "adapter_io.load.") if k.endswith(".a")]
    b_keys = [k[:-2] + ".b" for k in a_keys]
    shapes = {k.replace("adapter_io.load.", "init."): refs[k].shape for k in _keys(refs, "adapter_io.load.")}
    if any(k not in outs or outs[k].shape != shapes[k] for k in a_keys + b_keys):
        return 0.0, "init_lora tree differs from the adapter layout"
    b_zero = mean_score(exact_agreement(outs[k], np.zeros_like(outs[k])) for k in b_keys)
    scaled = np.concatenate([outs[k].ravel() * np.sqrt(outs[k].shape[0]) for k in a_keys])
    inside = float(np.mean(np.abs(scaled) <= 1.0 + 1e-6)) if np.all(np.isfinite(scaled)) else 0.0
    spread = banded_scalar_similarity(float(scaled.std()), values["init.std_mean"], values["init.std_band"])
    detail = f"b_zero={b_zero:.3f} inside_bound={inside:.3f} std_score={spread:.3f}"
    return mean_score([b_zero, inside, spread]), detail


def grade(tests: Path, app: Path, assets: Path) -> dict:
    refs = dict(np.load(tests / "refs" / "refs.npz"))
    values = json.loads((tests / "refs" / "refs.json").read_text())
    inputs = dict(np.load(tests / "inputs" / "inputs.npz"))
    params = json.loads((tests / "inputs" / "params.json").read_text())
    params["interface"] = INTERFACE
    params["base_cases"] = BASE_CASES
    probed = {k for k in refs if not any(
        k.startswith(f"{group}.base.") and int(k.rsplit(".", 1)[1]) not in cases for group, cases in BASE_CASES.items())}
    refs = {k: v for k, v in refs.items() if k in probed}
    checks: list[Check] = []

    def add(check_id: str, aspect: str, level: int, score: float, detail: str = "") -> None:
        checks.append(Check(check_id, aspect, level, score, detail))

    # ---- L0: static structure and independence --------------------------------------------
    findings = scan_forbidden_imports(app, FORBIDDEN) if app.is_dir() else ["candidate missing"]
    present = [m for m in MODULES if (app / m).is_file()]
    add("L0.layout", "spec", 0, len(present) / len(MODULES), f"{len(present)}/{len(MODULES)} modules")

    # The probes and the end-to-end runs are independent: both start at once.
    budget = max(BUDGET_FLOOR_S, BUDGET_FACTOR * values["train.cpu_s"])
    train_params = {"train_config": params["train_config"], "own_seed": values["train.own.seed"], "budget_s": budget}
    train_inputs = {k: v for k, v in inputs.items() if k.startswith("init_adapter_file.")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        e2e_future = pool.submit(run_candidate, drivers.TRAIN, app_dir=app, assets_dir=assets, inputs=train_inputs,
                                 json_inputs=train_params, timeout_s=budget + 60, forbidden=FORBIDDEN)
        probes = run_candidate(drivers.PROBES, app_dir=app, assets_dir=assets, inputs=inputs,
                               json_inputs=params, timeout_s=PROBES_TIMEOUT_S, forbidden=FORBIDDEN)
        e2e = e2e_future.result()
    outs, got = probes.arrays, probes.values

    def section(run, name: str, compute) -> tuple[float, str]:
        failure = run.failed(name)
        if failure is not None:
            lines = failure.strip().splitlines()
            return 0.0, lines[-1][:300] if lines else "failed"
        return compute()

    found = got.get("interface", {}) if isinstance(got.get("interface"), dict) else {}
    wanted = sum(len(v) for v in INTERFACE.values())
    have = sum(len(set(found.get(m, [])) & set(n)) for m, n in INTERFACE.items())
    add("L0.interface", "spec", 0, have / wanted, f"{have}/{wanted} public names")

    def tree_match(prefix_out: str, prefix_ref: str) -> tuple[float, str]:
        want = {k[len(prefix_ref):]: refs[k].shape for k in _keys(refs, prefix_ref)}
        have_ = {k[len(prefix_out):]: outs[k].shape for k in _keys(outs, prefix_out)}
        ok = sum(1 for k, s in want.items() if have_.get(k) == s)
        extra = len(set(have_) - set(want))
        return ok / (len(want) + extra), f"{ok}/{len(want)} leaves match, {extra} unexpected"

    add("L0.param_tree", "spec", 0, *section(probes, "convert", lambda: tree_match("convert.", "convert.")))
    add("L0.adapter_tree", "spec", 0,
        *section(probes, "lora_init", lambda: tree_match("init.", "adapter_io.load.")))

    # ---- L1: data pipeline, schedule, modules ------------------------------------------------
    def tokenizer_score():
        parts = [_lists(got.get("tok.encode"), values["tok.encode"]),
                 exact_agreement(np.asarray(got.get("tok.decode"), dtype=object), np.asarray(values["tok.decode"], dtype=object)),
                 exact_agreement(got.get("tok.specials"), values["tok.specials"])]
        return mean_score(parts), " ".join(f"{p:.3f}" for p in parts)

    add("L1.tokenizer", "numeric", 1, *section(probes, "tokenizer", tokenizer_score))
    add("L1.template", "numeric", 1, *section(probes, "template", lambda: (mean_score([
        _lists(got.get("template.prompt"), values["template.prompt"]),
        _lists(got.get("template.response"), values["template.response"])]), "")))
    add("L1.data.split", "numeric", 1, *section(probes, "data", lambda: (mean_score([
        exact_agreement(got.get("data.split"), values["data.split"]),
        exact_agreement(np.asarray(got.get("data.val_prompts"), dtype=object),
                        np.asarray(values["data.val_prompts"], dtype=object))]), "")))
    add("L1.data.encode", "numeric", 1, *section(probes, "data", lambda: (mean_score(
        _lists(c, r) for c, r in zip(got.get("data.encode") or [[]] * len(values["data.encode"]), values["data.encode"])), "")))
    add("L1.data.collate", "numeric", 1, *section(probes, "data", lambda: (mean_score(
        exact_agreement(outs.get(k), refs[k]) for k in ("data.collate.input_ids", "data.collate.labels")), "")))
    add("L1.data.batches", "numeric", 1, *section(probes, "data", lambda: (
        exact_agreement(got.get("data.batches"), values["data.batches"]), "")))
    add("L1.schedule", "numeric", 1, *section(probes, "schedule", lambda: (
        _tensors(refs, outs, ["schedule.lr"]), "")))
    add("L1.rms_norm", "numeric", 1, *section(probes, "rms_norm", lambda: (
        _tensors(refs, outs, _keys(refs, "rms_norm.")), "")))
    add("L1.rope_tables", "numeric", 1, *section(probes, "rope", lambda: (
        _tensors(refs, outs, _keys(refs, "rope.")), "")))
    add("L1.rotary", "numeric", 1, *section(probes, "rotary", lambda: (
        _tensors(refs, outs, ["rotary.apply"]), "")))
    add("L1.attention", "numeric", 1, *section(probes, "attention", lambda: (
        _tensors(refs, outs, _keys(refs, "attn.")), "")))
    add("L1.swiglu", "numeric", 1, *section(probes, "mlp", lambda: (_tensors(refs, outs, _keys(refs, "mlp.")), "")))
    add("L1.lora_linear", "numeric", 1, *section(probes, "lora_linear", lambda: (
        _tensors(refs, outs, ["lora_linear"]), "")))
    add("L1.lora_init", "behavioral", 1, *section(probes, "lora_init", lambda: _init_score(outs, refs, values)))

    # ---- L2-L3: conversion, adapter files, composed forward ---------------------------------
    add("L2.convert", "numeric", 2, *section(probes, "convert", lambda: (
        _tensors(refs, outs, _keys(refs, "convert.")), "")))
    add("L2.adapter_io", "numeric", 2, *section(probes, "adapter_io", lambda: (
        _tensors(refs, outs, _keys(refs, "adapter_io.")), "")))
    for kind in ("base", "lora"):
        keys = _keys(refs, f"forward.{kind}.")
        add(f"L3.forward.{kind}", "numeric", 3, *section(probes, "forward", lambda keys=keys: (mean_score(
            mean_score([distributional_similarity(outs[k], refs[k]), tensor_similarity(outs[k], refs[k])])
            if k in outs else 0.0 for k in keys), "")))

    # ---- L4: loss, gradients, optimizer steps ------------------------------------------------
    add("L4.loss", "numeric", 4, *section(probes, "loss", lambda: (mean_score([
        scalar_similarity(got.get("loss.value", np.nan), values["loss.value"]),
        scalar_similarity(got.get("loss.sum", np.nan), values["loss.sum"]),
        exact_agreement(got.get("loss.count", -1), values["loss.count"])]), "")))
    add("L4.grads", "numeric", 4, *section(probes, "grads", lambda: (_tensors(refs, outs, _keys(refs, "grads.")), "")))
    add("L4.steps.loss", "behavioral", 4, *section(probes, "steps", lambda: (
        _series(got.get("steps.loss"), values["steps.loss"]), "")))
    add("L4.steps.lr", "behavioral", 4, *section(probes, "steps", lambda: (
        tensor_similarity(got.get("steps.lr", np.nan), values["steps.lr"]), "")))
    add("L4.steps.grad_norm", "behavioral", 4, *section(probes, "steps", lambda: (
        _series(got.get("steps.grad_norm"), values["steps.grad_norm"]), "")))
    add("L4.steps.lora", "behavioral", 4, *section(probes, "steps", lambda: (
        _tensors(refs, outs, _keys(refs, "steps.lora.")), "")))
    add("L4.steps.base_frozen", "behavioral", 4, *section(probes, "steps", lambda: (
        float(got.get("steps.base_unchanged", 0.0)), "fraction of base entries unchanged")))

    # ---- L5-L6: the real entry point, under the time budget -----------------------------------
    ev, ea = e2e.values, e2e.arrays
    fixed = ev.get("train.fixed.metrics") or {}
    own = ev.get("train.own.metrics") or {}
    ref_fixed = values["train.fixed.metrics"]
    add("L5.train.completes", "behavioral", 5, *section(e2e, "train.fixed", lambda: (
        1.0, f"{ev.get('train.fixed.wall_s', 0):.1f}s of {budget:.0f}s")))
    add("L5.train.loss_curve", "behavioral", 5, *section(e2e, "train.fixed", lambda: (
        _series(fixed.get("train_loss"), ref_fixed["train_loss"]), "")))
    add("L5.train.adapter", "behavioral", 5, *section(e2e, "train.fixed", lambda: (
        mean_score(tensor_similarity(ea.get("train.fixed.adapter." + k[len("train.fixed.adapter."):], np.nan), refs[k])
                   for k in _keys(refs, "train.fixed.adapter.")), "")))
    add("L6.val_loss.fixed_init", "behavioral", 6, *section(e2e, "train.fixed", lambda: (
        banded_scalar_similarity(fixed.get("val_loss", np.nan), ref_fixed["val_loss"], values["train.fixed.val_band"]),
        f"{fixed.get('val_loss')} vs {ref_fixed['val_loss']:.5f}")))
    add("L6.val_loss.own_init", "behavioral", 6, *section(e2e, "train.own", lambda: (
        banded_scalar_similarity(own.get("val_loss", np.nan), values["train.own.val_mean"], values["train.own.val_band"]),
        f"{own.get('val_loss')} vs {values['train.own.val_mean']:.5f} ± {values['train.own.val_band']:.5f}")))

    leaked = sorted(set(probes.leaked) | set(e2e.leaked))
    independent = not findings and not leaked and not _forbidden_missing(probes) and not _forbidden_missing(e2e)
    result = spec_gated_reward(checks, independent=independent)
    result["independence"] = {"static": findings[:20], "leaked": leaked,
                              "isolation": sorted({probes.isolation, e2e.isolation})}
    result["timing"] = {"probes_s": probes.duration_s, "train_s": e2e.duration_s, "budget_s": budget}
    return result


def main() -> int:
    tests = _env_path("TESTS_DIR", "/tests")
    app = _env_path("APP_DIR", "/app")
    assets = _env_path("ASSETS_DIR", "/assets")
    logs = _env_path("LOGS_DIR", "/logs/verifier")
    if not nested_sandbox_ready(logs, forbidden=FORBIDDEN, assets_dir=assets):  # before any candidate code
        print("the candidate's nested sandbox cannot start here: reported as an infrastructure failure")
        return 0
    write_reward(logs, grade(tests, app, assets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
