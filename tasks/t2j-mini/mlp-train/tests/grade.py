"""The mlp-train grader: runs the candidate torch-free and offline, scores it, writes reward.json.

Self-contained (numpy + this directory). Paths come from the environment:
TESTS_DIR (/tests), APP_DIR (/app), ASSETS_DIR (/assets), LOGS_DIR (/logs/verifier).

Levels (002 §C.4): L0 spec gate (independence, interface, converter, checkpoint layout);
L1 data pipeline, schedule, blocks, loss; L2-L3 composed forward over three batch sizes;
L4 loss and gradients, held-out evaluation, a 25-step optimizer trajectory; L5 the real
training entry point under a time budget; L6 held-out loss and accuracy of the trained
model, banded by the original's own spread over dropout seeds.
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
BUDGET_FACTOR = 6.0  # end-to-end budget: this many times the original's own wall time ...
BUDGET_FLOOR_S = 120.0  # ... but never less (JAX compiles on first call; machines differ)
NUMERIC_TIMEOUT_S = 300.0


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name, default))


def _grouped(refs: dict[str, np.ndarray], prefix: str) -> list[str]:
    return sorted(k for k in refs if k.startswith(prefix))


def _tensors(refs, outs, keys) -> float:
    return mean_score(tensor_similarity(outs[k], refs[k]) if k in outs else 0.0 for k in keys)


def _exact(refs, outs, keys) -> float:
    return mean_score(exact_agreement(outs[k], refs[k]) if k in outs else 0.0 for k in keys)


def _forbidden_missing(run) -> bool:
    """A section failed because a forbidden package could not be imported (runtime leak)."""
    return any(f"No module named '{name}" in tb for tb in run.errors.values() for name in FORBIDDEN)


def grade(tests: Path, app: Path, assets: Path) -> dict:
    refs = dict(np.load(tests / "refs" / "refs.npz"))
    meta = json.loads((tests / "refs" / "meta.json").read_text())
    inputs = dict(np.load(tests / "inputs.npz"))
    checks: list[Check] = []

    def add(check_id, aspect, level, score, detail=""):
        checks.append(Check(check_id, aspect, level, score, detail))

    def section_score(run, section, compute):
        failure = run.failed(section)
        if failure is not None:
            return 0.0, failure.strip().splitlines()[-1][:300] if failure.strip() else "failed"
        return compute(), ""

    findings = scan_forbidden_imports(app, FORBIDDEN) if app.is_dir() else ["candidate missing"]
    add("L0.independence.static", "spec", 0, 0.0 if findings else 1.0, "; ".join(findings[:5]))

    params = {"interface": drivers.INTERFACE, "forbidden": FORBIDDEN,
              "trajectory_steps": meta["trajectory_steps"], "hidden_inputs": meta["hidden_inputs"],
              "logit_inputs": meta["logit_inputs"]}
    budget_s = max(BUDGET_FLOOR_S, BUDGET_FACTOR * float(meta["reference_wall_s"]))
    # the two candidate runs are independent: run them side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        num_future = pool.submit(run_candidate, drivers.NUMERIC, app_dir=app, assets_dir=assets, inputs=inputs,
                                 json_inputs=params, timeout_s=NUMERIC_TIMEOUT_S, forbidden=FORBIDDEN)
        e2e_future = pool.submit(run_candidate, drivers.END_TO_END, app_dir=app, assets_dir=assets,
                                 json_inputs={"budget_s": budget_s}, timeout_s=budget_s + 120.0,
                                 forbidden=FORBIDDEN)
        num, e2e = num_future.result(), e2e_future.result()
    runtime_clean = not (num.leaked or e2e.leaked or _forbidden_missing(num) or _forbidden_missing(e2e))
    add("L0.independence.runtime", "spec", 0, 1.0 if runtime_clean else 0.0,
        ", ".join(num.leaked + e2e.leaked) or ("imports a forbidden package" if not runtime_clean else ""))
    out = num.arrays

    present = num.values.get("interface", {})
    expected = [f"{m}.{n}" for m, names in drivers.INTERFACE.items() for n in names]
    missing = [name for name in expected if not present.get(name)]
    add("L0.interface", "spec", 0, (len(expected) - len(missing)) / len(expected),
        ("missing: " + ", ".join(missing)) if missing else "")

    sd_keys = _grouped(refs, "sd/")
    score, why = section_score(num, "convert", lambda: float(
        {k for k in out if k.startswith("sd/")} == set(sd_keys) and _exact(refs, out, sd_keys) == 1.0))
    add("L0.converter.roundtrip", "spec", 0, score, why or "to_state_dict(load_checkpoint(raw)) == raw")

    shape_keys = _grouped(refs, "e2e/shape/")
    def layout() -> float:
        names = {k.removeprefix("ckpt/") for k in e2e.arrays if k.startswith("ckpt/")}
        wanted = {k.removeprefix("e2e/shape/") for k in shape_keys}
        ok = names == wanted and all(
            list(e2e.arrays["ckpt/" + n].shape) == refs["e2e/shape/" + n].tolist() for n in wanted)
        return float(ok)
    score, why = section_score(e2e, "outputs", layout)
    add("L0.checkpoint.layout", "spec", 0, score, why or "saved checkpoint has the original's names and shapes")

    # ---- numeric: L1 modules, L2-L3 composed forward, L4 loss and gradients ----
    for check_id, section, level, compute in [
        ("L1.data.split", "data", 1, lambda: _exact(refs, out, ["data/train_y", "data/val_y"])),
        ("L1.data.normalize", "data", 1,
         lambda: _tensors(refs, out, ["data/mean", "data/std", "data/train_x", "data/val_x"])),
        ("L1.data.batches", "batches", 1, lambda: mean_score(
            [_exact(refs, out, ["data/batches_e0", "data/batches_e1"]), _tensors(refs, out, ["data/first_batch_x"])])),
        ("L1.optim.schedule", "schedule", 1, lambda: _tensors(refs, out, ["schedule/lr"])),
        ("L1.model.blocks", "hidden", 1, lambda: _tensors(refs, out, _grouped(refs, "hidden/"))),
        ("L1.losses.cross_entropy", "loss", 1,
         lambda: mean_score(scalar_similarity(out.get(k), refs[k]) for k in _grouped(refs, "ce/"))),
        ("L3.forward.logits", "forward", 3, lambda: _tensors(refs, out, _grouped(refs, "logits/"))),
        ("L3.forward.distribution", "forward", 3, lambda: mean_score(
            distributional_similarity(out.get(k), refs[k]) for k in _grouped(refs, "logits/"))),
        ("L4.loss_and_grads", "grad", 4, lambda: mean_score(
            [scalar_similarity(out.get("grad/loss"), refs["grad/loss"]),
             _tensors(refs, out, [k for k in _grouped(refs, "grad/") if k != "grad/loss"])])),
        ("L4.evaluate", "evaluate", 4, lambda: mean_score(
            [scalar_similarity(out.get("eval/loss"), refs["eval/loss"]),
             scalar_similarity(out.get("eval/accuracy"), refs["eval/accuracy"])])),
    ]:
        score, why = section_score(num, section, compute)
        add(check_id, "numeric", level, score, why)

    # ---- behavioral: L4 optimizer trajectory, L5 end-to-end, L6 held-out ----
    score, why = section_score(num, "trajectory", lambda: mean_score(
        [_tensors(refs, out, ["traj/loss"]), _tensors(refs, out, ["traj/lr"]),
         _tensors(refs, out, _grouped(refs, "traj/final/"))]))
    add("L4.optimizer.trajectory", "behavioral", 4, score, why)

    metrics = e2e.values.get("metrics") or {}
    in_budget = e2e.values.get("returncode") == 0 and float(e2e.values.get("wall_s", 1e9)) <= budget_s
    run_note = f"wall {e2e.values.get('wall_s', float('nan')):.1f}s of {budget_s:.0f}s budget"
    if not in_budget:
        run_note = f"end-to-end run failed or over budget (rc={e2e.values.get('returncode')}; {run_note})"
    held = meta["held_out"]

    def banded(name: str, value) -> float:
        if not in_budget or value is None:
            return 0.0
        return banded_scalar_similarity(value, held[name]["reference"], held[name]["band"])

    losses = metrics.get("train_loss") or []
    tail = float(np.mean(losses[-meta["tail"]:])) if len(losses) >= meta["tail"] else None
    add("L5.train.loss_tail", "behavioral", 5, banded("train_tail", tail), run_note)
    add("L6.heldout.val_loss", "behavioral", 6, banded("val_loss", metrics.get("val_loss")), run_note)
    add("L6.heldout.val_accuracy", "behavioral", 6, banded("val_accuracy", metrics.get("val_accuracy")), run_note)

    result = spec_gated_reward(checks, independent=not findings and runtime_clean)
    result["meta"] = {"isolation": num.isolation, "numeric_run_s": round(num.duration_s, 2),
                      "end_to_end_run_s": round(e2e.duration_s, 2), "budget_s": budget_s,
                      "refs_recorded_with": meta["recorded_with"]}
    if num.returncode != 0 and not num.finished:
        result["meta"]["numeric_log_tail"] = num.log[-1500:]
    return result


def main() -> int:
    tests = _env_path("TESTS_DIR", "/tests")
    app = _env_path("APP_DIR", "/app")
    assets = _env_path("ASSETS_DIR", "/assets")
    logs = _env_path("LOGS_DIR", "/logs/verifier")
    if not nested_sandbox_ready(logs, forbidden=FORBIDDEN, assets_dir=assets):  # before any candidate code
        print("the candidate's nested sandbox cannot start here: reported as an infrastructure failure")
        return 0
    result = grade(tests, app, assets)
    path = write_reward(logs, result)
    print(json.dumps({"reward": result["reward"], "components": result["components"]}))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
