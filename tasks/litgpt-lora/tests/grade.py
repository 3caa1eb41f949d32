"""The litgpt-lora grader: runs the candidate torch-free and offline, scores it, writes reward.json.

Self-contained (numpy + this directory). Paths come from the environment:
TESTS_DIR (/tests), APP_DIR (/app), ASSETS_DIR (/assets), LOGS_DIR (/logs/verifier).

Every numeric comparison is decided against the reference's own noise: the references were
recorded from litgpt 0.5.13 in float32 and again in float64 (tests/record_refs.py); with
d = 1 - similarity, an output within SPREAD * max(d(ref32, ref64), RESOLUTION) of the float32
reference scores 1, and beyond it the score falls by a quarter per decade of excess.

Levels (002 §C.4): L0 spec gate (independence, module layout, public interface, converted
parameter tree); L1 checkpoint reading, RoPE tables and rotation, RMSNorm, cross-entropy, the
learning-rate schedule, trainable marking, LoRA initialisation; L2 checkpoint conversion round
trip; L3 base and LoRA forward over three shapes, merged weights and merged forward; L4 loss,
LoRA gradients and a six-step AdamW trajectory with the base frozen; L5 the fine-tuning loop
end to end (loss curve, schedule, trained factors, validation loss), each list as litgpt's own
`finetune.lora.fit` logs it.
"""

from __future__ import annotations

import json
import math
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
SPREAD = 10.0
RESOLUTION = 2.0**-23
PROBES_TIMEOUT_S = 420.0
FIT_TIMEOUT_S = 300.0
INIT_DRAWS = 5
MODULES = [
    "litgpt/__init__.py", "litgpt/config.py", "litgpt/model.py", "litgpt/lora.py", "litgpt/utils.py",
    "litgpt/scripts/__init__.py", "litgpt/scripts/convert_lit_checkpoint.py", "litgpt/finetune/__init__.py",
    "litgpt/finetune/lora.py",
]
INTERFACE = {
    "litgpt.config": ["Config"],
    "litgpt.model": ["build_rope_cache", "apply_rope", "rms_norm", "gpt_forward"],
    "litgpt.lora": ["Config", "gpt_forward", "init_lora", "merge_lora_weights", "mark_only_lora_as_trainable",
                    "lora_filter"],
    "litgpt.utils": ["chunked_cross_entropy", "load_checkpoint"],
    "litgpt.scripts.convert_lit_checkpoint": ["params_from_state_dict", "state_dict_from_params"],
    "litgpt.finetune.lora": ["TrainArgs", "get_lr_scheduler", "make_optimizer", "loss_fn", "make_train_step",
                             "validate", "fit"],
}  # fmt: skip


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name, default))


def within_noise(distance: float, noise: float) -> float:
    """1 inside the reference's noise tolerance; a quarter less per decade beyond it."""
    if not math.isfinite(distance):
        return 0.0
    tolerance = SPREAD * max(noise, RESOLUTION)
    if distance <= tolerance:
        return 1.0
    return max(0.0, 1.0 - 0.25 * math.log10(distance / tolerance))


def tensor_score(cand, ref, ref64) -> float:
    if cand is None:
        return 0.0
    return within_noise(1.0 - tensor_similarity(cand, ref), 1.0 - tensor_similarity(ref64, ref))


def scalar_score(cand, ref, ref64) -> float:
    try:
        cand = float(cand)
    except (TypeError, ValueError):
        return 0.0
    return within_noise(1.0 - scalar_similarity(cand, ref), 1.0 - scalar_similarity(ref64, ref))


def series_score(cand, ref, ref64) -> float:
    if not isinstance(cand, list) or len(cand) != len(ref):
        return 0.0
    return mean_score(scalar_score(c, r, n) for c, r, n in zip(cand, ref, ref64, strict=False))


def grade(tests: Path, app: Path, assets: Path) -> dict:
    refs = dict(np.load(tests / "refs" / "refs.npz"))
    values = json.loads((tests / "refs" / "refs.json").read_text())
    f64 = values["f64"]
    inputs = dict(np.load(tests / "inputs" / "inputs.npz"))
    params = json.loads((tests / "inputs" / "params.json").read_text())
    params["interface"] = INTERFACE
    params["init_draws"] = INIT_DRAWS
    checks: list[Check] = []

    def add(check_id: str, aspect: str, level: int, score: float, detail: str = "") -> None:
        checks.append(Check(check_id, aspect, level, score, detail))

    findings = scan_forbidden_imports(app, FORBIDDEN) if app.is_dir() else ["candidate missing"]
    present = [m for m in MODULES if (app / m).is_file()]
    add("L0.layout", "spec", 0, len(present) / len(MODULES), f"{len(present)}/{len(MODULES)} modules")

    fit_inputs = {k: v for k, v in inputs.items() if k.startswith(("sd.", "fit_init."))}
    with ThreadPoolExecutor(max_workers=1) as pool:
        fit_future = pool.submit(run_candidate, drivers.FIT, app_dir=app, assets_dir=assets, inputs=fit_inputs,
                                 json_inputs=params, timeout_s=FIT_TIMEOUT_S, forbidden=FORBIDDEN)
        probes = run_candidate(drivers.PROBES, app_dir=app, assets_dir=assets, inputs=inputs, json_inputs=params,
                               timeout_s=PROBES_TIMEOUT_S, forbidden=FORBIDDEN)
        fit = fit_future.result()
    outs, got = probes.arrays, probes.values

    def section(run, name: str, compute) -> tuple[float, str]:
        failure = run.failed(name)
        if failure is not None:
            lines = failure.strip().splitlines()
            return 0.0, lines[-1][:300] if lines else "failed"
        return compute()

    def tensors(prefix: str, run=None) -> tuple[float, str]:
        arrays = (run or probes).arrays
        keys = sorted(k for k in refs if k.startswith(prefix))
        scores = [tensor_score(arrays.get(k), refs[k], refs.get("f64." + k, refs[k])) for k in keys]
        worst = min(zip(scores, keys, strict=True))[1] if keys else ""
        return mean_score(scores), f"{len(keys)} outputs, lowest {worst}"

    found = got.get("interface", {}) if isinstance(got.get("interface"), dict) else {}
    wanted = sum(len(v) for v in INTERFACE.values())
    have = sum(len(set(found.get(m, [])) & set(n)) for m, n in INTERFACE.items())
    add("L0.interface", "spec", 0, have / wanted, f"{have}/{wanted} public names")

    def tree() -> tuple[float, str]:
        want = {k[3:]: v.shape for k, v in inputs.items() if k.startswith("sd.")}
        have_ = {k[len("convert."):]: v.shape for k, v in outs.items() if k.startswith("convert.")}
        ok = sum(1 for k, s in want.items() if have_.get(k) == s)
        extra = len(set(have_) - set(want))
        return ok / (len(want) + extra), f"{ok}/{len(want)} state-dict entries, {extra} unexpected"

    add("L0.param_tree", "spec", 0, *section(probes, "convert", tree))

    # ---- L1 ----------------------------------------------------------------------------------
    def load_score() -> tuple[float, str]:
        keys = [k for k in refs if k.startswith("load.")]
        extra = len([k for k in outs if k.startswith("load.") and k not in refs])
        exact = [exact_agreement(outs.get(k), refs[k]) for k in keys]
        return mean_score(exact) * len(keys) / (len(keys) + extra), f"{len(keys)} tensors, {extra} unexpected"

    add("L1.load_checkpoint", "numeric", 1, *section(probes, "load", load_score))
    add("L1.rope_cache", "numeric", 1, *section(probes, "rope", lambda: (mean_score(
        tensors(f"rope.{n}")[0] for n in ("cos", "sin", "cos_b500", "sin_b500")), "")))  # fmt: skip
    add("L1.apply_rope", "numeric", 1, *section(probes, "rope", lambda: tensors("rope.apply")))
    add("L1.rms_norm", "numeric", 1, *section(probes, "rms_norm", lambda: tensors("rms_norm")))
    add("L1.cross_entropy", "numeric", 1, *section(probes, "cross_entropy", lambda: (mean_score(
        scalar_score(got.get(k), values[k], f64[k]) for k in ("ce.chunked", "ce.chunked_list", "ce.plain")), "")))
    add("L1.lr_schedule", "numeric", 1, *section(probes, "schedule", lambda: (
        series_score(list(np.asarray(outs.get("schedule.lr", [])).tolist()), values["schedule.lr"],
                     values["schedule.lr"]), "")))

    def trainable() -> tuple[float, str]:
        want, have_ = set(values["trainable"]), set(got.get("trainable") or [])
        filtered = got.get("lora_filter") or []
        expect = ["lora_" in n for n in sorted(k[3:] for k in inputs if k.startswith("sd."))]
        names = len(want & have_) / len(want | have_) if want | have_ else 1.0
        return mean_score([names, exact_agreement(filtered, expect)]), f"{len(want & have_)}/{len(want)} trainable"

    add("L1.trainable", "numeric", 1, *section(probes, "trainable", trainable))

    def init_score() -> tuple[float, str]:  # B zero, A in ±1/sqrt(in), spread banded by litgpt's own draws
        a_keys = [k for k in values["trainable"] if k.endswith("lora_A")]
        b_keys = [k for k in values["trainable"] if k.endswith("lora_B")]
        shapes = {k: inputs["sd." + k].shape for k in a_keys + b_keys}
        if any(outs.get("init." + k) is None or outs["init." + k].shape != shapes[k] for k in a_keys + b_keys):
            return 0.0, "init_lora's factors differ from litgpt's layout"
        b_zero = mean_score(exact_agreement(outs["init." + k], np.zeros(shapes[k])) for k in b_keys)
        scaled = np.concatenate([outs["init." + k].ravel() * np.sqrt(shapes[k][1]) for k in a_keys])
        inside = float(np.mean(np.abs(scaled) <= 1.0 + 1e-6))
        draws = got.get("init.spreads") or [float("nan")]
        # the mean of INIT_DRAWS draws, within litgpt's own seed-to-seed band of one draw
        spread = banded_scalar_similarity(float(np.mean(draws)), values["init.std_mean"], values["init.std_band"])
        return mean_score([b_zero, inside, spread]), f"b_zero={b_zero:.3f} inside={inside:.3f} spread={spread:.3f}"

    add("L1.lora_init", "behavioral", 1, *section(probes, "lora_init", init_score))

    # ---- L2-L3 -------------------------------------------------------------------------------
    add("L2.convert_round_trip", "numeric", 2, *section(probes, "convert", lambda: (mean_score(
        exact_agreement(outs.get("convert." + k[3:]), v) for k, v in inputs.items() if k.startswith("sd.")), "")))
    add("L3.forward.base", "numeric", 3, *section(probes, "forward", lambda: tensors("forward.base.")))
    add("L3.forward.lora", "numeric", 3, *section(probes, "forward", lambda: tensors("forward.lora.")))
    add("L3.merge.weights", "numeric", 3, *section(probes, "merge", lambda: (
        tensors("merge.")[0] * (1.0 if not got.get("merge.leftover") else 0.5), "")))
    add("L3.merge.forward", "numeric", 3, *section(probes, "merge", lambda: tensors("forward.merged.")))

    # ---- L4 ----------------------------------------------------------------------------------
    add("L4.loss", "numeric", 4, *section(probes, "grads", lambda: (
        scalar_score(got.get("loss.value"), values["loss.value"], f64["loss.value"]), "")))
    add("L4.grads", "numeric", 4, *section(probes, "grads", lambda: tensors("grads.")))
    add("L4.steps.loss", "behavioral", 4, *section(probes, "steps", lambda: (
        series_score(got.get("steps.loss"), values["steps.loss"], f64["steps.loss"]), "")))
    add("L4.steps.lora", "behavioral", 4, *section(probes, "steps", lambda: tensors("steps.")))
    add("L4.steps.base_frozen", "behavioral", 4, *section(probes, "steps", lambda: (
        float(got.get("steps.base_unchanged", 0.0)), "fraction of base entries unchanged")))

    # ---- L5: the fine-tuning loop end to end --------------------------------------------------
    fv = fit.values
    add("L5.fit.loss_curve", "behavioral", 5, *section(fit, "fit", lambda: (
        series_score(fv.get("fit.train_loss"), values["fit.train_loss"], f64["fit.train_loss"]), "")))
    add("L5.fit.schedule", "behavioral", 5, *section(fit, "fit", lambda: (
        series_score(fv.get("fit.lr"), values["fit.lr"], values["fit.lr"]), "")))
    add("L5.fit.adapter", "behavioral", 5, *section(fit, "fit", lambda: tensors("fit.", fit)))
    add("L5.fit.val_loss", "behavioral", 5, *section(fit, "fit", lambda: (
        scalar_score(fv.get("fit.val_loss"), values["fit.val_loss"], f64["fit.val_loss"]),
        f"{fv.get('fit.val_loss')} vs {values['fit.val_loss']:.6f}")))

    leaked = sorted(set(probes.leaked) | set(fit.leaked))
    missing_forbidden = any(f"No module named '{n}" in tb for run in (probes, fit) for tb in run.errors.values()
                            for n in FORBIDDEN)  # fmt: skip
    independent = not findings and not leaked and not missing_forbidden
    result = spec_gated_reward(checks, independent=independent)
    result["independence"] = {"static": findings[:20], "leaked": leaked,
                              "isolation": sorted({probes.isolation, fit.isolation})}
    result["timing"] = {"probes_s": probes.duration_s, "fit_s": fit.duration_s}
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
