"""Grader of litgpt-generate: runs the candidate (torch absent, offline, in a nested sandbox) and scores it.

Levels (002 §C.4, read for serving):
    L0  structure and independence (spec gate): module layout, public interface, the
        converted checkpoint (every tensor, once, finite); no torch import anywhere, none
        loaded at run time
    L1  modules: RoPE tables, RoPE on 1-D and batched positions, RMSNorm, KV-cache writes
    L2  logits without a cache over two shapes; prefill and teacher-forced step-wise decode
        through the cache (logits of every step, and the cache's contents); decode at
        per-row positions
    L3  greedy generation with an end-of-sequence id, token for token
    L4  the sampler (top-k, then temperature, then top-p) judged by its tie-robust
        next-token distribution, alone and through generation; seeded reproducibility

Tolerances come from the original's own noise: each output was recorded in float32 and in
float64 (tests/refs/meta.json). A value counts as equal when it is within NOISE_FACTOR times
that difference (at least NOISE_FACTOR float32 ulps of the reference's scale); outside it a
check earns at most half its similarity. Distributions are compared over classes of tokens
with equal logits (which member of a tie a library keeps is its own choice), against a band
measured as the original sampler's own spread over seeds.

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
DRIVER_TIMEOUT_S = 240.0
# A float32 port differs from the float32 original by about as much as the original differs from
# its own float64 run; the factor leaves room for another library's reduction order and fusion.
NOISE_FACTOR = 10.0
ULP = float(np.finfo(np.float32).eps)


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
    checks = spec_checks(run, refs) + numeric_checks(run, inputs, refs, meta) + behavioral_checks(run, refs, meta, params)
    result = spec_gated_reward(checks, independent=independent)
    result["independence_findings"] = findings[:20] + [f"loaded at run time: {m}" for m in run.leaked[:20]]
    result["candidate"] = {
        "isolation": run.isolation, "duration_s": round(run.duration_s, 2), "returncode": run.returncode,
        "timed_out": run.timed_out, "errors": {k: v[-800:] for k, v in run.errors.items()},
        "section_s": run.values.get("__section_s__", {}),
    }
    write_reward(LOGS, result)


def last_line(why: str) -> str:
    return why.strip().splitlines()[-1][:200] if why.strip() else "failed"


def within_noise(cand, ref: np.ndarray, noise: float) -> tuple[float, str]:
    """1 when every element is within the reference's own noise band; else at most half the similarity."""
    if cand is None or np.shape(cand) != ref.shape:
        return 0.0, f"shape {None if cand is None else np.shape(cand)} vs {ref.shape}"
    cand = np.asarray(cand, np.float64)
    if not np.all(np.isfinite(cand)):
        return 0.0, "not finite"
    tol = NOISE_FACTOR * max(noise, ULP * float(np.max(np.abs(ref))))
    err = np.abs(cand - ref)
    inside = float(np.mean(err <= tol))
    similarity = tensor_similarity(cand, ref)
    score = 1.0 if inside == 1.0 else 0.5 * inside * similarity
    return score, f"max err {float(err.max()):.3g} (tol {tol:.3g}), {inside:.4f} within"


# ---- L0 ------------------------------------------------------------------------------------
def spec_checks(run, refs) -> list[Check]:
    imported = run.failed("import") is None
    missing_modules = run.values.get("missing_modules", ["?"]) if imported else ["import failed"]
    missing_names = run.values.get("missing_names", ["?"]) if imported else ["import failed"]
    v = run.values
    params_ok = (run.failed("params") is None and v.get("param_count") == int(refs["param_count"])
                 and v.get("param_tensors") == int(refs["param_tensors"]) and v.get("params_finite") is True)  # fmt: skip
    return [
        Check("L0.layout", "spec", 0, float(imported and not missing_modules), f"missing: {missing_modules}"),
        Check("L0.interface", "spec", 0, float(imported and not missing_names), f"missing: {missing_names}"[:300]),
        Check("L0.params", "spec", 0, float(params_ok),
              f"{v.get('param_tensors')} tensors, {v.get('param_count')} values vs "
              f"{int(refs['param_tensors'])}, {int(refs['param_count'])}" + (f"; {last_line(run.failed('params'))}" if run.failed("params") else "")),
    ]


# ---- L1, L2 and the isolated sampler ----------------------------------------------------------
def numeric_checks(run, inputs, refs, meta) -> list[Check]:
    noise = meta["noise"]

    def compare(section, names):
        why = run.failed(section)
        if why:
            return 0.0, last_line(why)
        scored = [within_noise(run.arrays.get(n), refs[n], noise[n]) for n in names]
        return mean_score(s for s, _ in scored), "; ".join(d for _, d in scored)

    checks = []
    for cid, section, names in [
        ("L1.rope_cache", "l1.rope_cache", ["rope_cos", "rope_sin"]),
        ("L1.apply_rope", "l1.apply_rope", ["rope_1d", "rope_2d"]),
        ("L1.rms_norm", "l1.rms_norm", ["rms", "rms_small"]),
        ("L1.kv_cache", "l1.kv_cache", ["kv_1d", "kv_2d"]),
        ("L2.decode_logits", "l2.decode", ["dec_logits"]),
        ("L2.decode_cache", "l2.decode", ["dec_cache"]),
        ("L2.batched_positions", "l2.batched_positions", ["bp_logits"]),
    ]:
        checks.append(Check(cid, "numeric", int(cid[1]), *compare(section, names)))
    scored = [compare(f"l2.{n}", [n]) for n in ("fwd_a", "fwd_b")]
    checks.append(Check("L2.forward", "numeric", 2, mean_score(s for s, _ in scored), " | ".join(d for _, d in scored)))

    why = run.failed("l4.sampler")
    drawn = run.arrays.get("sp_drawn")
    if why or drawn is None or drawn.shape[0] != refs["sp_probs"].shape[0]:
        checks.append(Check("L4.sampler", "numeric", 4, 0.0, last_line(why or " ") if why else "no draws"))
    else:
        rows = [distribution_score(d, p, logits, band) for d, p, logits, band in
                zip(drawn, refs["sp_probs"], inputs["sp_logits"], meta["sampler_bands"])]  # fmt: skip
        checks.append(Check("L4.sampler", "numeric", 4, mean_score(s for s, _ in rows), " ".join(d for _, d in rows)))
    return checks


def tie_classes(logits: np.ndarray) -> np.ndarray:
    """Per token, the index of its class of equal logits."""
    return np.unique(logits, return_inverse=True)[1].reshape(-1)


def distribution_score(drawn, probs: np.ndarray, logits_or_classes: np.ndarray, band: float,
                       classes: np.ndarray | None = None) -> tuple[float, str]:  # fmt: skip
    """How close the drawn tokens' tie-class histogram is to the reference distribution (JS distance)."""
    drawn = np.asarray(drawn, np.float64).reshape(-1)
    if drawn.size == 0 or not np.all(np.isfinite(drawn)) or np.any(drawn != np.round(drawn)):
        return 0.0, "bad tokens"
    if np.any(drawn < 0) or np.any(drawn >= probs.size):
        return 0.0, "token out of range"
    classes = tie_classes(logits_or_classes) if classes is None else classes
    hist = np.bincount(drawn.astype(np.int64), minlength=probs.size) / drawn.size
    size = int(classes.max()) + 1
    distance = js_distance(np.bincount(classes, hist, size), np.bincount(classes, probs, size))
    return banded_scalar_similarity(distance, 0.0, band), f"{distance:.3f}/{band:.3f}"


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (base 2) between two probability vectors."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = 0.5 * (p + q)

    def kl(a, b):
        return float(np.sum(np.where(a > 0, a * np.log2(np.maximum(a, 1e-300) / np.maximum(b, 1e-300)), 0.0)))

    return float(np.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m))))


# ---- L3 and live L4 ---------------------------------------------------------------------------
def behavioral_checks(run, refs, meta, params) -> list[Check]:
    checks = []
    why = run.failed("l3.greedy")
    want = refs["greedy"].astype(np.int64)
    got = pad_outputs(run.values.get("greedy"), want.shape)
    if why or got is None:
        checks.append(Check("L3.greedy", "behavioral", 3, 0.0, last_line(why) if why else "malformed output"))
    else:
        want = np.pad(want, ((0, 0), (0, 1)), constant_values=-1)
        score = exact_agreement(got, want)
        checks.append(Check("L3.greedy", "behavioral", 3, score, f"{score:.4f} of tokens agree"))

    why = run.failed("l4.generate_distribution")
    first = run.values.get("gen_first")
    if why or not isinstance(first, list) or len(first) != params["gen_n"]:
        checks.append(Check("L4.generate_distribution", "behavioral", 4, 0.0, last_line(why) if why else "no tokens"))
    else:
        score, detail = distribution_score(first, refs["gen_probs"], None, meta["gen_band"],
                                           classes=refs["gen_classes"].astype(np.int64))  # fmt: skip
        checks.append(Check("L4.generate_distribution", "behavioral", 4, score, f"JS distance/band {detail}"))

    why = run.failed("l4.seeds")
    seqs = run.values.get("seed_tokens")
    if why or not isinstance(seqs, list) or len(seqs) != len(params["seed_keys"]):
        checks.append(Check("L4.seed_determinism", "behavioral", 4, 0.0, last_line(why) if why else "no output"))
    else:
        full = all(len(s) == params["seed_tokens"] for s in seqs)
        same = float(full and seqs[0] == seqs[1])
        varied = float(full and len({tuple(s) for s in seqs}) > 1)
        checks.append(Check("L4.seed_determinism", "behavioral", 4, 0.5 * (same + varied),
                            f"all {params['seed_tokens']} tokens: {full}, same key reproduces: {bool(same)}, "
                            f"keys differ: {bool(varied)}"))  # fmt: skip
    return checks


def pad_outputs(outputs, shape) -> np.ndarray | None:
    """Token lists as a [R, T + 1] array, -1 past each list's end (None if malformed).

    The extra column catches a request that runs past the longest reference output.
    """
    if not isinstance(outputs, list) or len(outputs) != shape[0]:
        return None
    arr = np.full((shape[0], shape[1] + 1), -1, np.int64)
    for i, ids in enumerate(outputs):
        if not isinstance(ids, list):
            return None
        ids = [int(t) for t in ids][: shape[1] + 1]
        arr[i, : len(ids)] = ids
    return arr


if __name__ == "__main__":
    if not nested_sandbox_ready(LOGS, forbidden=["torch"], assets_dir=ASSETS):  # before any candidate code
        print("the candidate's nested sandbox cannot start here: reported as an infrastructure failure")
        sys.exit(0)
    try:
        main()
    except Exception:  # the grader itself failed: score 0, say why
        write_reward(LOGS, {"reward": 0.0, "components": {}, "error": traceback.format_exc()[-2000:]})
        raise
