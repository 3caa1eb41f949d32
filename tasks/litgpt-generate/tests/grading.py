"""Shared grading library of the t2j-mini tasks (self-contained: numpy and the standard library only).

Three files: this one (the measures, the checks and the reward, and the names a grader
imports), `grading_run.py` (running the candidate) and `grading_sandbox.py` (the sandbox it
runs in). Every task carries an identical copy of all three in its `tests/` (refreshed by
`common/sync.py`), so a grader never imports anything outside its own task.

API
===

Similarity measures (002 §C.5). Each returns a float in [0, 1] (1 = identical), promotes
both operands to float32 first, and maps NaN, inf or a shape mismatch to 0. None needs a
threshold; `EPS` only guards divisions by zero.

    tensor_similarity(a, b)              geometric mean of direction (angular similarity,
                                         1 - angle/pi) and magnitude (min/max of the norms)
    distributional_similarity(a, b)      1 - Jensen-Shannon distance (base 2) between
                                         softmax(a) and softmax(b) along the last axis,
                                         averaged over the leading axes (inputs are logits)
    scalar_similarity(a, b)              1 - 2|a-b| / (|a|+|b|), clipped at 0
    banded_scalar_similarity(a, b, band) 1 inside |a-b| <= band, then the scalar measure of
                                         the excess; `band` comes from the reference's own
                                         run-to-run spread, never from a candidate
    exact_agreement(a, b)                fraction of equal elements (ints, labels, keys)

Checks and the spec-gated reward (002 §C.4, Eq. 1):

    Check(id, aspect, level, score, detail)   aspect is "spec", "numeric" or "behavioral"
    spec_gated_reward(checks) -> dict         reward = independence * mean(spec)
                                                      * mean over the similarity
                                                        dimensions that ran
    write_reward(logs_dir, result)            writes reward.json atomically (call it last)

Independence:

    scan_forbidden_imports(root, forbidden) -> ["file:line: import torch", ...]
    (the runtime half is in every candidate run: `CandidateRun.leaked` lists forbidden
    modules found in `sys.modules` of the driver at exit)

Running the candidate:

    run_candidate(driver, *, app_dir, assets_dir, inputs, json_inputs, timeout_s, ...)
        -> CandidateRun(returncode, timed_out, duration_s, arrays, values, errors,
                        leaked, isolation, log)

    The grader writes `driver` (Python source) and the inputs into a fresh scratch
    directory and runs it with the grader's own interpreter inside a nested bubblewrap
    sandbox that shows only: the Python installation (with every forbidden package
    physically removed from site-packages), system libraries, the candidate at
    `app_mount` (read-only), the assets at `assets_mount` (read-only) and the scratch
    directory at /scratch. The tests directory, the references and /logs are absent;
    there is no network; the sandbox has its own PID namespace and /proc, no further
    user namespaces, and a /tmp of limited size. Isolation fails closed: where that
    sandbox cannot be built, `run_candidate` raises `IsolationUnavailable`; it never
    runs the candidate in a weaker one. Only a caller that asks for it by name gets
    `isolation="uid"` (an unprivileged uid with an import blocker) or `"none"` (tests
    of this module).

    nested_sandbox_ready(logs_dir, *, forbidden, assets_dir, app_mount, assets_mount) -> bool

    A grader calls it first, before any candidate code runs: it starts the very sandbox
    `run_candidate` builds, over an empty stand-in for the candidate, and runs the
    interpreter in it. Where that fails it writes reward.json with
    `"infrastructure_error"` (the grader's own machinery failed: twin retries the grade
    and never scores it) and returns False; the grader then stops without running the
    candidate. Its answer depends on the machine, never on the candidate, which has not
    run yet and never sees /logs; whatever fails once the candidate has run is the
    candidate's outcome (a crash of the grader is reward 0).

    Inside the driver these names are predefined:
        INPUTS       dict of arrays loaded from inputs.npz
        PARAMS       dict loaded from inputs.json
        APP, ASSETS  mount paths (str)
        save(name, array)      an output array     -> CandidateRun.arrays[name]
        record(name, value)    a JSON output       -> CandidateRun.values[name]
        section(name)          context manager: an exception inside is recorded in
                               CandidateRun.errors[name] (traceback tail) and the driver
                               continues with the next section
    Outputs are written when the driver exits, also after an uncaught exception.
"""

from __future__ import annotations

import ast
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from grading_run import OUTPUT_LIMIT, CandidateRun, read_output, run_candidate
from grading_sandbox import (
    CANDIDATE_GID,
    CANDIDATE_UID,
    HARBOR_FOLDERS,
    IsolationUnavailable,
    _nested_sandbox_unavailable,
    in_container,
    remove_scratch,
    uid_fallback_unavailable,
)

__all__ = [
    "ASPECTS", "CANDIDATE_GID", "CANDIDATE_UID", "EPS", "HARBOR_FOLDERS", "OUTPUT_LIMIT",
    "CandidateRun", "Check", "IsolationUnavailable", "banded_scalar_similarity",
    "distributional_similarity", "exact_agreement", "in_container", "mean_score",
    "nested_sandbox_ready", "read_output", "remove_scratch", "run_candidate", "scalar_similarity",
    "scan_forbidden_imports", "spec_gated_reward", "tensor_similarity", "uid_fallback_unavailable",
    "write_reward",
]  # fmt: skip

EPS = 1e-12
ASPECTS = ("spec", "numeric", "behavioral")


# ---------------------------------------------------------------------------------------------
# similarity measures
# ---------------------------------------------------------------------------------------------
def _pair(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Both operands as float32 arrays of one shape, or None when they cannot be compared."""
    try:
        x = np.asarray(a, dtype=np.float32)
        y = np.asarray(b, dtype=np.float32)
    except (TypeError, ValueError):
        return None
    if x.shape != y.shape or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return None
    return x, y


def tensor_similarity(a: Any, b: Any) -> float:
    """Direction and magnitude agreement of two arrays, in [0, 1].

    Direction is the angular similarity 1 - angle/pi (more sensitive near 1 than the
    cosine itself); magnitude is min(|a|,|b|)/max(|a|,|b|), so a uniform scaling bug that
    a cosine alone would miss still lowers the score. Two all-zero arrays are identical.
    """
    pair = _pair(a, b)
    if pair is None:
        return 0.0
    x, y = (v.astype(np.float64).ravel() for v in pair)
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx < EPS and ny < EPS:
        return 1.0
    if nx < EPS or ny < EPS:
        return 0.0
    cos = float(np.clip(np.dot(x, y) / (nx * ny), -1.0, 1.0))
    direction = 1.0 - math.acos(cos) / math.pi
    magnitude = min(nx, ny) / max(nx, ny)
    return _unit(math.sqrt(direction * magnitude))


def distributional_similarity(a: Any, b: Any) -> float:
    """1 - Jensen-Shannon distance between softmax(a) and softmax(b) over the last axis.

    Args:
        a, b: logits `[..., classes]`; the score is averaged over the leading axes.
    """
    pair = _pair(a, b)
    if pair is None or pair[0].ndim == 0:
        return 0.0
    p, q = (_softmax(v.astype(np.float64)) for v in pair)
    m = 0.5 * (p + q)
    jsd = 0.5 * (_kl(p, m) + _kl(q, m))  # in bits, within [0, 1]
    distance = np.sqrt(np.clip(jsd, 0.0, 1.0))
    return _unit(float(np.mean(1.0 - distance)))


def scalar_similarity(a: Any, b: Any) -> float:
    """1 - 2|a-b|/(|a|+|b|), clipped to [0, 1]: 0 once they differ by their mean magnitude."""
    pair = _pair(a, b)
    if pair is None or pair[0].size != 1:
        return 0.0
    x, y = float(pair[0].ravel()[0]), float(pair[1].ravel()[0])
    return _unit(1.0 - 2.0 * abs(x - y) / (abs(x) + abs(y) + EPS))


def banded_scalar_similarity(a: Any, b: Any, band: float) -> float:
    """Scalar similarity of the part of |a-b| that exceeds `band` (1 inside the band).

    Args:
        a: candidate value; b: reference value.
        band: half-width from the reference's own run-to-run variability (>= 0).
    """
    pair = _pair(a, b)
    if pair is None or pair[0].size != 1 or not math.isfinite(band) or band < 0:
        return 0.0
    x, y = float(pair[0].ravel()[0]), float(pair[1].ravel()[0])
    excess = max(0.0, abs(x - y) - band)
    return _unit(1.0 - 2.0 * excess / (abs(x) + abs(y) + EPS))


def exact_agreement(a: Any, b: Any) -> float:
    """Fraction of equal elements of two arrays (or lists) of one shape; 0 on a mismatch."""
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (TypeError, ValueError):
        return 0.0
    if x.shape != y.shape:
        return 0.0
    if x.size == 0:
        return 1.0
    if x.dtype.kind == "f" or y.dtype.kind == "f":
        if not (np.all(np.isfinite(x.astype(np.float64))) and np.all(np.isfinite(y.astype(np.float64)))):
            return 0.0
    return _unit(float(np.mean(x == y)))


def mean_score(scores: Iterable[float]) -> float:
    """Plain average of element scores (0 for none); NaN counts as 0."""
    values = [s if isinstance(s, (int, float)) and math.isfinite(s) else 0.0 for s in scores]
    return _unit(sum(values) / len(values)) if values else 0.0


def _unit(x: float) -> float:
    return float(min(1.0, max(0.0, x))) if math.isfinite(x) else 0.0


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log2(np.maximum(p, 1e-300)) - np.log2(np.maximum(q, 1e-300))), 0.0)
    return terms.sum(axis=-1)


# ---------------------------------------------------------------------------------------------
# checks and the spec-gated reward
# ---------------------------------------------------------------------------------------------
@dataclass
class Check:
    """One graded check.

    Attributes:
        id: stable name, e.g. "L2.forward.logits".
        aspect: "spec" (pass/fail structure and independence, the gate), "numeric"
            (one forward/backward pass or module on fixed inputs) or "behavioral"
            (optimizer loops, end-to-end runs, held-out behaviour).
        level: lattice level 0-6 (002 §C.4).
        score: in [0, 1]; a crash, NaN, forbidden import or time-out is 0.
        detail: one line for humans (element scores, error).
    """

    id: str
    aspect: str
    level: int
    score: float
    detail: str = ""

    def __post_init__(self) -> None:
        if self.aspect not in ASPECTS:
            raise ValueError(f"check {self.id}: aspect must be one of {ASPECTS}")
        self.score = _unit(float(self.score)) if self.score is not None else 0.0


def spec_gated_reward(checks: list[Check], *, independent: bool) -> dict[str, Any]:
    """Combine checks into the spec-gated reward (002 Eq. 1, §C.5).

    reward = [independent] * mean(spec scores) * mean(d for d in (numeric, behavioral) if ran)

    Independence is a hard gate (a candidate that relies on the forbidden framework earns
    nothing); the other spec checks scale the reward by the fraction passed; each
    similarity dimension is the plain average of its checks, renormalized over the
    dimensions that have at least one check.

    Returns:
        {"reward", "components": {"independence", "spec", "numeric", "behavioral"},
         "checks": {id: {"aspect", "level", "score", "detail"}}}
    """
    by_aspect: dict[str, list[float]] = {a: [] for a in ASPECTS}
    for check in checks:
        by_aspect[check.aspect].append(check.score)
    spec = mean_score(by_aspect["spec"]) if by_aspect["spec"] else 1.0
    dims = {a: mean_score(by_aspect[a]) for a in ("numeric", "behavioral") if by_aspect[a]}
    similarity = sum(dims.values()) / len(dims) if dims else 0.0
    gate = 1.0 if independent else 0.0
    return {
        "reward": _unit(gate * spec * similarity),
        "components": {
            "independence": gate,
            "spec": spec,
            "numeric": dims.get("numeric"),
            "behavioral": dims.get("behavioral"),
        },
        "checks": {
            c.id: {"aspect": c.aspect, "level": c.level, "score": c.score, "detail": c.detail[:500]} for c in checks
        },
    }


def write_reward(logs_dir: str | Path, result: dict[str, Any]) -> Path:
    """Write `reward.json` atomically into `logs_dir` (the last thing a grader does), never through a link."""
    logs = Path(logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    folder = os.open(logs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(".reward.json.tmp", flags, 0o644, dir_fd=folder)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(result, indent=2, sort_keys=True))
        os.replace(".reward.json.tmp", "reward.json", src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)
    return logs / "reward.json"


# ---------------------------------------------------------------------------------------------
# independence (static half)
# ---------------------------------------------------------------------------------------------
def scan_forbidden_imports(root: str | Path, forbidden: Iterable[str] = ("torch",)) -> list[str]:
    """Find imports of forbidden top-level packages in every .py file under `root`.

    Catches `import torch`, `from torch.x import y`, `__import__("torch")` and
    `importlib.import_module("torch...")` with a literal name. A file that does not
    parse is reported too (it cannot be cleared).

    Returns:
        "relative/path.py:LINE: what" for each finding (empty: clean).
    """
    names = set(forbidden)
    root = Path(root)
    findings: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError as exc:
            findings.append(f"{rel}:{exc.lineno}: does not parse")
            continue
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Import):
                hit = next((a.name for a in node.names if a.name.split(".")[0] in names), None)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                hit = node.module if node.module.split(".")[0] in names else None
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                arg = node.args[0].value
                if fname in ("__import__", "import_module") and isinstance(arg, str):
                    hit = arg if arg.split(".")[0] in names else None
            if hit:
                findings.append(f"{rel}:{getattr(node, 'lineno', 0)}: imports {hit}")
    return findings


def nested_sandbox_ready(
    logs_dir: str | Path,
    *,
    forbidden: Iterable[str] = ("torch",),
    assets_dir: str | Path | None = None,
    app_mount: str = "/app",
    assets_mount: str = "/assets",
) -> bool:
    """Whether the candidate's nested sandbox starts here; if not, say so in reward.json.

    Call it before any candidate code runs (see the module docstring). An empty
    directory stands in for the candidate, so nothing the candidate holds can change
    the answer. False: reward.json now reports the infrastructure failure.
    """
    why = _nested_sandbox_unavailable(sorted(set(forbidden)), assets_dir, app_mount, assets_mount)
    if why is None:
        return True
    write_reward(logs_dir, {"reward": 0.0, "components": {}, "checks": {}, "infrastructure_error": why})
    return False
