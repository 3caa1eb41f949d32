"""Grader of llama-paged-serve: runs the candidate engine with torch absent and scores it.

Levels (002 §C.4, read for serving):
    L0  structure and independence (spec gate): module layout, public interface,
        parameter correspondence; no torch import anywhere, none loaded at run time
    L1  module numerics: RMSNorm, rotary, prefill attention, paged decode attention
        (against the original's paged output and a dense reference), KV-cache writes
    L2  prefill logits and teacher-forced step-wise decode logits over ragged batches
    L3  end to end: the engine serves a fixed request set under a time budget derived
        from the original's own time; greedy tokens, finish reasons, output order
    L4  sampler: filtered distributions on fixed logits; live seeded sampling through
        the engine (distribution within the original's own sampling spread; seed
        determinism)

Reads TESTS_DIR, APP_DIR, ASSETS_DIR, LOGS_DIR; writes LOGS_DIR/reward.json last.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np

TESTS = Path(os.environ.get("TESTS_DIR", "/tests"))
sys.path.insert(0, str(TESTS))

from grading import (  # noqa: E402
    CandidateRun,
    Check,
    banded_scalar_similarity,
    distributional_similarity,
    exact_agreement,
    mean_score,
    nested_sandbox_ready,
    run_candidate,
    scan_forbidden_imports,
    spec_gated_reward,
    tensor_similarity,
    write_reward,
)

APP = Path(os.environ.get("APP_DIR", "/app"))
ASSETS = Path(os.environ.get("ASSETS_DIR", "/assets"))
LOGS = Path(os.environ.get("LOGS_DIR", "/logs/verifier"))
# The end-to-end run may take this many times the original's wall time (one-time XLA
# compilation included); the same factor applies to every request set of this task.
BUDGET_FACTOR = 30.0
DRIVER_TIMEOUT_S = 300.0
PROB_FLOOR = 1e-30  # probabilities are compared as log(max(p, floor)), i.e. as logits


def main() -> None:
    with np.load(TESTS / "inputs.npz") as f:
        inputs = {k: f[k] for k in f.files}
    params = json.loads((TESTS / "inputs.json").read_text())
    with np.load(TESTS / "refs" / "refs.npz") as f:
        refs = {k: f[k] for k in f.files}
    meta = json.loads((TESTS / "refs" / "meta.json").read_text())

    findings = scan_forbidden_imports(APP, ["torch"]) if APP.is_dir() else ["candidate directory missing"]
    if findings:  # the gate is closed whatever the numbers say: do not spend time running it
        run = CandidateRun(returncode=-1, timed_out=False, duration_s=0.0, isolation="not run")
    else:
        run = run_candidate(
            (TESTS / "driver.py").read_text(), app_dir=APP, assets_dir=ASSETS, inputs=inputs,
            json_inputs=params, timeout_s=DRIVER_TIMEOUT_S,
        )
    independent = not findings and not run.leaked
    checks = spec_checks(run, refs) + numeric_checks(run, inputs, refs, params) + behavioral_checks(run, refs, meta)
    result = spec_gated_reward(checks, independent=independent)
    result["independence_findings"] = findings[:20] + [f"loaded at run time: {m}" for m in run.leaked[:20]]
    result["candidate"] = {
        "isolation": run.isolation, "duration_s": round(run.duration_s, 2), "returncode": run.returncode,
        "timed_out": run.timed_out, "errors": {k: v[-800:] for k, v in run.errors.items()},
        "serve_budget_s": round(BUDGET_FACTOR * meta["serve_seconds"], 2),
        "section_s": run.values.get("__section_s__", {}),
    }
    write_reward(LOGS, result)


# ---- L0 ------------------------------------------------------------------------------------
def spec_checks(run, refs) -> list[Check]:
    imported = run.failed("import") is None
    missing_modules = run.values.get("missing_modules", ["?"]) if imported else ["import failed"]
    missing_names = run.values.get("missing_names", ["?"]) if imported else ["import failed"]
    count_ok = run.failed("params") is None and run.values.get("param_count") == int(refs["param_count"])
    params_ok = count_ok and run.values.get("params_finite") is True
    return [
        Check("L0.layout", "spec", 0, float(imported and not missing_modules), f"missing: {missing_modules}"),
        Check("L0.interface", "spec", 0, float(imported and not missing_names), f"missing: {missing_names}"),
        Check("L0.params", "spec", 0, float(params_ok),
              f"param count {run.values.get('param_count')} vs {int(refs['param_count'])}"),
    ]


# ---- L1, L2 and the isolated sampler ----------------------------------------------------------
def numeric_checks(run, inputs, refs, params) -> list[Check]:
    def arr(name):
        return run.arrays.get(name)

    def tensor(section, pairs):
        why = run.failed(section)
        if why:
            return 0.0, why.strip().splitlines()[-1][:200]
        scores = [tensor_similarity(arr(c), refs[r]) for c, r in pairs]
        return mean_score(scores), " ".join(f"{s:.6f}" for s in scores)

    checks = []
    for cid, section, pairs in [
        ("L1.rms_norm", "l1.rms", [("rms", "rms"), ("rms_small", "rms_small")]),
        ("L1.rotary", "l1.rotary", [("rotary", "rotary")]),
        ("L1.paged_attention", "l1.paged_attention",
         [("paged_attention", "paged_attention"), ("paged_attention", "paged_attention_dense")]),
    ]:
        checks.append(Check(cid, "numeric", 1, *tensor(section, pairs)))
    checks.append(Check("L1.prefill_attention", "numeric", 1, *prefill_attention_score(run, inputs, refs)))
    checks.append(Check("L1.kv_write", "numeric", 1, *kv_write_score(run, inputs, refs)))

    pre, dec = [], []
    for i in range(params["l2_batches"]):
        if run.failed(f"l2.{i}"):
            pre.append(0.0), dec.append(0.0)
            continue
        lengths = inputs[f"l2_{i}_lengths"]
        valid = np.arange(refs[f"l2_{i}_prefill"].shape[1])[None, :] < lengths[:, None]
        cand = arr(f"l2_{i}_prefill")
        pre.append(distributional_similarity(cand[valid], refs[f"l2_{i}_prefill"][valid])
                   if cand is not None and cand.shape == refs[f"l2_{i}_prefill"].shape else 0.0)
        dec.append(distributional_similarity(arr(f"l2_{i}_decode"), refs[f"l2_{i}_decode"]))
    checks.append(Check("L2.prefill_logits", "numeric", 2, mean_score(pre), " ".join(f"{s:.6f}" for s in pre)))
    checks.append(Check("L2.decode_logits", "numeric", 2, mean_score(dec), " ".join(f"{s:.6f}" for s in dec)))

    why = run.failed("l4.filtered_probs")
    if why:
        checks.append(Check("L4.filtered_probs", "numeric", 4, 0.0, why.strip().splitlines()[-1][:200]))
    else:
        cand, ref = arr("filtered_probs"), refs["filtered_probs"]
        rows = [distributional_similarity(as_logits(c), as_logits(r)) for c, r in zip(cand, ref)] \
            if cand is not None and cand.shape == ref.shape else [0.0]
        checks.append(Check("L4.filtered_probs", "numeric", 4, mean_score(rows), " ".join(f"{s:.4f}" for s in rows)))
    return checks


def prefill_attention_score(run, inputs, refs) -> tuple[float, str]:
    why = run.failed("l1.prefill_attention")
    if why:
        return 0.0, why.strip().splitlines()[-1][:200]
    cand, ref = run.arrays.get("prefill_attention"), refs["prefill_attention"]
    if cand is None or cand.shape != ref.shape:
        return 0.0, "shape mismatch"
    valid = np.arange(ref.shape[1])[None, :] < inputs["pre_lengths"][:, None]  # padded query rows are free
    score = tensor_similarity(cand[valid], ref[valid])
    return score, f"{score:.6f}"


def kv_write_score(run, inputs, refs) -> tuple[float, str]:
    """Compare the slots either side changed (a whole-pool comparison would hide a misplaced write)."""
    why = run.failed("l1.kv_write")
    if why:
        return 0.0, why.strip().splitlines()[-1][:200]
    scores = []
    for name, before in (("kv_k_cache", inputs["pg_k_cache"]), ("kv_v_cache", inputs["pg_v_cache"])):
        cand, ref = run.arrays.get(name), refs[name]
        if cand is None or cand.shape != ref.shape:
            scores.append(0.0)
            continue
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
        changed = np.any(flat(cand) != flat(before), axis=(1, 2)) | np.any(flat(ref) != flat(before), axis=(1, 2))
        scores.append(tensor_similarity(flat(cand)[changed], flat(ref)[changed]))
    return mean_score(scores), " ".join(f"{s:.6f}" for s in scores)


def as_logits(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(np.asarray(probs, np.float64), PROB_FLOOR))


# ---- L3 and live L4 ---------------------------------------------------------------------------
def behavioral_checks(run, refs, meta) -> list[Check]:
    checks = []
    budget = BUDGET_FACTOR * meta["serve_seconds"]
    why = run.failed("l3.serve")
    seconds = run.values.get("serve_seconds")
    if why is None and not (isinstance(seconds, (int, float)) and seconds <= budget):
        why = f"end-to-end run took {seconds} s, budget {budget:.1f} s"
    if why:
        detail = why.strip().splitlines()[-1][:200]
        checks += [Check("L3.serve_tokens", "behavioral", 3, 0.0, detail),
                   Check("L3.serve_finish", "behavioral", 3, 0.0, detail)]
    else:
        tokens = pad_outputs(run.values.get("serve_tokens"), refs["serve_tokens"].shape)
        want_tokens = np.pad(refs["serve_tokens"], ((0, 0), (0, 1)), constant_values=-1)
        score = exact_agreement(tokens, want_tokens) if tokens is not None else 0.0
        checks.append(Check("L3.serve_tokens", "behavioral", 3, score, f"{score:.4f} in {seconds:.2f} s"))
        got = list(run.values.get("serve_finish_reasons", [])) + list(run.values.get("serve_prompt_order", []))
        want = meta["serve_finish_reasons"] + meta["serve_prompt_order"]
        checks.append(Check("L3.serve_finish", "behavioral", 3, exact_agreement(got, want), f"{got}"[:300]))

    why = run.failed("l4.distribution")
    drawn = run.values.get("dist_tokens")
    probs = refs["dist_probs"]
    if why or not isinstance(drawn, list) or len(drawn) == 0 or not all(0 <= int(t) < probs.size for t in drawn):
        checks.append(Check("L4.sampling_distribution", "behavioral", 4, 0.0, (why or "bad tokens")[-200:]))
    else:
        hist = np.bincount(np.asarray(drawn, np.int64), minlength=probs.size) / len(drawn)
        distance = js_distance(hist, probs)
        score = banded_scalar_similarity(distance, 0.0, meta["dist_band"])
        checks.append(Check("L4.sampling_distribution", "behavioral", 4, score,
                            f"JS distance {distance:.4f}, band {meta['dist_band']:.4f}"))

    why = run.failed("l4.seeds")
    seqs = run.values.get("seed_tokens")
    if why or not isinstance(seqs, list) or len(seqs) != 4:
        checks.append(Check("L4.seed_determinism", "behavioral", 4, 0.0, (why or "no output")[-200:]))
    else:
        same = float(seqs[0] == seqs[1] and len(seqs[0]) > 0)
        varied = float(len({tuple(s) for s in seqs}) > 1)
        checks.append(Check("L4.seed_determinism", "behavioral", 4, 0.5 * (same + varied),
                            f"same seed reproduces: {bool(same)}, seeds differ: {bool(varied)}"))
    return checks


def pad_outputs(outputs, shape) -> np.ndarray | None:
    """Token lists as a [R, T + 1] array, -1 past each list's end (None if malformed).

    The extra column catches a request that runs past the longest reference output.
    """
    if not isinstance(outputs, list) or len(outputs) != shape[0]:
        return None
    arr = np.full((shape[0], shape[1] + 1), -1, np.int64)
    for i, ids in enumerate(outputs):
        ids = [int(t) for t in ids][: shape[1] + 1]
        arr[i, : len(ids)] = ids
    return arr


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (base 2) between two probability vectors."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = 0.5 * (p + q)

    def kl(a, b):
        return float(np.sum(np.where(a > 0, a * np.log2(np.maximum(a, 1e-300) / np.maximum(b, 1e-300)), 0.0)))

    return float(np.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m))))


if __name__ == "__main__":
    if not nested_sandbox_ready(LOGS, forbidden=["torch"], assets_dir=ASSETS):  # before any candidate code
        print("the candidate's nested sandbox cannot start here: reported as an infrastructure failure")
        sys.exit(0)
    try:
        main()
    except Exception:  # the grader itself failed: score 0, say why
        write_reward(LOGS, {"reward": 0.0, "components": {}, "error": traceback.format_exc()[-2000:]})
        raise
