"""Shared grading library of the t2j-mini tasks (self-contained: numpy and the standard library only).

Every task carries an identical copy of this file in its `tests/` (refreshed by
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
import io
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

EPS = 1e-12
OUTPUT_LIMIT = 256 << 20  # bytes of one output file of the candidate's run
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
            c.id: {"aspect": c.aspect, "level": c.level, "score": c.score, "detail": c.detail[:500]}
            for c in checks
        },
    }


def write_reward(logs_dir: str | Path, result: dict[str, Any]) -> Path:
    """Write `reward.json` atomically into `logs_dir` (the last thing a grader does)."""
    logs = Path(logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    tmp = logs / ".reward.json.tmp"
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
    os.replace(tmp, logs / "reward.json")
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


# ---------------------------------------------------------------------------------------------
# running the candidate
# ---------------------------------------------------------------------------------------------
@dataclass
class CandidateRun:
    """What one driver run produced.

    Attributes:
        returncode: exit status of the driver (124 on a time-out).
        timed_out: the time limit killed it.
        duration_s: wall time, including interpreter start.
        arrays: outputs saved with `save(name, array)`.
        values: outputs recorded with `record(name, value)`.
        errors: section name -> traceback tail, for sections that raised.
        leaked: forbidden modules found loaded in the driver at exit (runtime independence).
        isolation: "bwrap", "uid" or "none" (how the candidate was kept from the grader's files).
        log: tail of the driver's stdout and stderr.
    """

    returncode: int
    timed_out: bool
    duration_s: float
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    leaked: list[str] = field(default_factory=list)
    isolation: str = "none"
    log: str = ""

    @property
    def finished(self) -> bool:
        """The driver reached its end and wrote its outputs."""
        return bool(self.values.get("__finished__"))

    def failed(self, section: str) -> str | None:
        """Why a section produced nothing usable (None when it ran to its end)."""
        if section in self.errors:
            return self.errors[section]
        if section not in self.values.get("__sections__", []):
            return "did not run" + (" (time-out)" if self.timed_out else f" (exit {self.returncode})")
        return None


_PRELUDE = r'''
import contextlib as _ctx, json as _json, os as _os, sys as _sys, traceback as _tb
import numpy as _np
_FORBIDDEN = set(__FORBIDDEN__)
APP, ASSETS = __APP__, __ASSETS__
if APP not in _sys.path:
    _sys.path.insert(0, APP)
_SCRATCH = _os.path.dirname(_os.path.abspath(__file__))
with _np.load(_os.path.join(_SCRATCH, "inputs.npz")) as _f:
    INPUTS = {k: _f[k] for k in _f.files}
with open(_os.path.join(_SCRATCH, "inputs.json")) as _f:
    PARAMS = _json.load(_f)
_ARRAYS, _VALUES, _ERRORS, _SECTIONS = {}, {}, {}, []

def save(name, array):
    _ARRAYS[name] = _np.asarray(array)

def record(name, value):
    _VALUES[name] = value

_TIMES = {}

@_ctx.contextmanager
def section(name):
    import time as _time
    _start = _time.monotonic()
    try:
        yield
        _SECTIONS.append(name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        _ERRORS[name] = "".join(_tb.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    finally:
        _TIMES[name] = round(_time.monotonic() - _start, 3)

def _flush(finished):
    _VALUES["__sections__"] = _SECTIONS
    _VALUES["__errors__"] = _ERRORS
    _VALUES["__section_s__"] = _TIMES
    _VALUES["__leaked__"] = sorted(m for m in list(_sys.modules) if m.split(".")[0] in _FORBIDDEN)
    _VALUES["__finished__"] = finished
    _np.savez(_os.path.join(_SCRATCH, "outputs.npz"), **_ARRAYS)
    with open(_os.path.join(_SCRATCH, "outputs.json"), "w") as _f:
        _json.dump(_VALUES, _f, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))

import atexit as _atexit
_atexit.register(lambda: _flush(False) if not _VALUES.get("__finished__") else None)
'''

_EPILOGUE = "\n_VALUES['__finished__'] = True\n_flush(True)\n"

_BLOCKER = r'''
import sys
class _Blocked:
    """Forbidden packages are absent for the candidate (grader fallback without bwrap)."""
    names = set(__FORBIDDEN__)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Blocked())
'''

_BWRAP_VARIANT: list[list[str]] = []  # cached namespace flags that work on this machine
NESTED_TMP_BYTES = 512 * 1024 * 1024


class IsolationUnavailable(RuntimeError):
    """The nested sandbox the candidate must run in cannot be built here (the grade fails)."""


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


def _nested_sandbox_unavailable(forbidden: list[str], assets_dir, app_mount: str, assets_mount: str) -> str | None:
    if _bwrap_flags() is None:
        why = uid_fallback_unavailable()
        if why is None:
            return None  # run_candidate drops the candidate to CANDIDATE_UID (a default Docker container)
        return (
            "the candidate's nested sandbox (bubblewrap with its own user, PID and network namespaces) "
            f"cannot start, and no uid drop is possible either: {why}"
        )
    scratch = Path(tempfile.mkdtemp(prefix="t2j-preflight-"))
    try:
        (scratch / "app").mkdir()
        (scratch / "scratch").mkdir()
        argv = _bwrap_argv(scratch / "app", assets_dir, scratch / "scratch", forbidden, app_mount, assets_mount)
        argv += ["--chdir", "/scratch", sys.executable, "-c", "import numpy"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/scratch", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1"}
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=120, env=env, cwd=str(scratch))
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the candidate's nested sandbox did not start: {exc}"
        if proc.returncode != 0:
            _BWRAP_VARIANT[:] = [[]]  # nor will run_candidate use it
            tail = proc.stderr.decode("utf-8", "replace").strip()[-300:]
            return f"the candidate's nested sandbox did not start (exit {proc.returncode}): {tail}"
        return None
    finally:
        remove_scratch(scratch)


def run_candidate(
    driver: str,
    *,
    app_dir: str | Path,
    assets_dir: str | Path | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    json_inputs: dict[str, Any] | None = None,
    timeout_s: float = 300.0,
    forbidden: Iterable[str] = ("torch",),
    app_mount: str = "/app",
    assets_mount: str = "/assets",
    env: dict[str, str] | None = None,
    isolation: str = "auto",
) -> CandidateRun:
    """Run a grader-written driver against the candidate, isolated from the grader's files.

    Args:
        driver: Python source run after the prelude described in the module docstring.
        app_dir: the candidate directory (mounted read-only at `app_mount`).
        assets_dir: the task's assets (read-only at `assets_mount`), if any.
        inputs: arrays the driver reads as `INPUTS`.
        json_inputs: values the driver reads as `PARAMS`.
        timeout_s: wall-time limit; the whole process tree is killed after it.
        forbidden: top-level packages that must be absent for the candidate.
        env: extra environment variables for the driver.
        isolation: "auto" (the nested sandbox; where it cannot start, the uid drop of
            `uid_fallback_unavailable`; else `IsolationUnavailable`), "bwrap" (only the nested
            sandbox), "uid" or "none" (only when asked for by name: tests of this module).

    Returns:
        A `CandidateRun`; failures of the candidate are data, never raised.

    Raises:
        IsolationUnavailable: the nested sandbox cannot be built here.
    """
    forbidden = sorted(set(forbidden))
    scratch = Path(tempfile.mkdtemp(prefix="t2j-run-"))
    try:
        os.chmod(scratch, 0o777)
        inside_scratch = "/scratch"
        mode = _choose_isolation(isolation)
        app_path = app_mount if mode == "bwrap" else str(Path(app_dir).resolve())
        assets_path = assets_mount if mode == "bwrap" else str(Path(assets_dir or "/nonexistent").resolve())
        source = (
            _PRELUDE.replace("__FORBIDDEN__", repr(forbidden))
            .replace("__APP__", repr(app_path))
            .replace("__ASSETS__", repr(assets_path))
            + "\n"
            + driver
            + _EPILOGUE
        )
        (scratch / "driver.py").write_text(source)
        np.savez(scratch / "inputs.npz", **(inputs or {}))
        (scratch / "inputs.json").write_text(json.dumps(json_inputs or {}))
        run_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": inside_scratch if mode == "bwrap" else str(scratch),
            "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "JAX_PLATFORMS": "cpu",
            "LANG": "C.UTF-8",
            "APP_DIR": app_path,
            "ASSETS_DIR": assets_path,
        }
        run_env.update(env or {})
        python = sys.executable
        if mode == "bwrap":
            argv = _bwrap_argv(Path(app_dir), assets_dir, scratch, forbidden, app_mount, assets_mount)
            argv += ["--chdir", inside_scratch, python, f"{inside_scratch}/driver.py"]
            preexec = None
        else:
            blocker = scratch / "_blocker"
            blocker.mkdir()
            (blocker / "sitecustomize.py").write_text(_BLOCKER.replace("__FORBIDDEN__", repr(forbidden)))
            run_env["PYTHONPATH"] = str(blocker)
            argv = [python, str(scratch / "driver.py")]
            preexec = _drop_privileges if mode == "uid" else None
            if mode == "uid":
                for path in scratch.rglob("*"):
                    os.chown(path, CANDIDATE_UID, CANDIDATE_GID)
                os.chown(scratch, CANDIDATE_UID, CANDIDATE_GID)
        started = time.monotonic()
        timed_out = False
        proc = subprocess.Popen(
            argv,
            cwd=str(scratch),
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, _ = proc.communicate()
        duration = time.monotonic() - started
        run = CandidateRun(
            returncode=124 if timed_out else proc.returncode,
            timed_out=timed_out,
            duration_s=duration,
            isolation=mode,
            log=out.decode("utf-8", errors="replace")[-6000:],
        )
        _read_outputs(scratch, run)
        return run
    finally:
        remove_scratch(scratch)


def _read_outputs(scratch: Path, run: CandidateRun) -> None:
    try:
        run.values = json.loads(read_output(scratch / "outputs.json"))
    except (OSError, ValueError, RecursionError):
        run.values = {}
    if not isinstance(run.values, dict):
        run.values = {}
    try:
        with np.load(io.BytesIO(read_output(scratch / "outputs.npz")), allow_pickle=False) as f:
            run.arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError):
        run.arrays = {}
    errors = run.values.get("__errors__", {})
    run.errors = errors if isinstance(errors, dict) else {}
    leaked = run.values.get("__leaked__", [])
    run.leaked = [str(m) for m in leaked] if isinstance(leaked, list) else []


def read_output(path: Path, limit: int = OUTPUT_LIMIT) -> bytes:
    """Read a file the candidate's run produced: a regular file only, never through a
    symlink (a link to the references must gain nothing), never blocking on a FIFO, and
    at most `limit` bytes. Raises OSError or ValueError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{path.name} is over {limit} bytes")
        os.set_blocking(fd, True)
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_scratch(scratch: Path) -> None:
    """Remove a scratch directory the candidate wrote into, at any depth."""
    try:
        shutil.rmtree(scratch, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(scratch)], check=False)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


HARBOR_FOLDERS = ("/tests", "/logs/verifier")  # where Harbor copies them into the container


def in_container() -> bool:
    """Whether the grader runs in a container (Docker, Podman), where its folders are its own copies:
    only there, and only at Harbor's paths, does it close them to others; elsewhere they may be the
    task's own files."""
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


def _drop_privileges() -> None:
    os.setgroups([])
    os.setgid(CANDIDATE_GID)
    os.setuid(CANDIDATE_UID)


def _choose_isolation(requested: str) -> str:
    if requested not in ("auto", "bwrap", "uid", "none"):
        raise ValueError(f"unknown isolation {requested!r}")
    if requested in ("uid", "none"):
        return requested
    if _bwrap_flags() is None:
        why = uid_fallback_unavailable() if requested == "auto" else "bwrap was asked for by name"
        if why is None:
            return "uid"
        raise IsolationUnavailable(
            "the candidate's sandbox (bubblewrap with its own user, PID and network namespaces "
            f"and /proc) cannot be started here, nor a uid drop ({why}); refusing a weaker one"
        )
    return "bwrap"


CANDIDATE_UID = CANDIDATE_GID = 65532  # neither root nor the uid twin's sandboxes run as (65534)
_UID_FALLBACK: list[str | None] = []  # cached answer of uid_fallback_unavailable
_UID_PROBE = r"""
import os, sys
logs, closed = sys.argv[1], sys.argv[2:]
if logs and os.access(logs, os.W_OK):
    print("writable: " + logs); sys.exit(3)
for root in closed:  # not even traversable: a file reached by its (known) name is as bad as a listed one
    if os.access(root, os.X_OK) or os.access(root, os.R_OK):
        print("reachable: " + root); sys.exit(3)
import numpy
"""


def uid_fallback_unavailable(protect: Iterable[str | Path] | None = None) -> str | None:
    """Why the candidate cannot run under a dropped uid here (None: it can), where bwrap cannot start.

    In a default Docker container (root, Docker's seccomp profile, no user namespaces), as
    Harbor runs graders, the candidate's side runs as `CANDIDATE_UID` with no groups and no
    capabilities instead; the network is the container's (Harbor tasks set
    `allow_internet = false`). That is only allowed when a child dropped to that uid can
    neither enter this `tests/` folder (not even to open a file by its name) nor write
    `$LOGS_DIR`, and can still import numpy; the grader first closes those folders to
    others where it owns them and runs in a container. `protect` overrides the folders
    that must stay closed (tests).
    """
    if protect is None and _UID_FALLBACK:
        return _UID_FALLBACK[0]
    closed = [Path(p) for p in (protect or [Path(__file__).resolve().parent])]
    logs = os.environ.get("LOGS_DIR", "")
    why = _uid_fallback_check(Path(logs) if logs and Path(logs).is_dir() else None, [r for r in closed if r.exists()])
    if protect is None:
        _UID_FALLBACK.append(why)
    return why


def _uid_fallback_check(logs: Path | None, closed: list[Path]) -> str | None:
    if os.geteuid() != 0:
        return "the grader is not root, so it cannot run the candidate as another uid"
    for root in [*closed, *([logs] if logs else [])]:
        try:
            if str(root) in HARBOR_FOLDERS and root.stat().st_uid == 0 and in_container():
                os.chmod(root, 0o700)  # Harbor's /tests and /logs/verifier: the grader's alone
        except OSError:
            pass  # a read-only mount: what the check below finds decides
    argv = [sys.executable, "-c", _UID_PROBE, str(logs or ""), *map(str, closed)]
    try:
        proc = subprocess.run(argv, capture_output=True,
                              timeout=60, preexec_fn=_drop_privileges, cwd="/")  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"a child cannot drop to uid {CANDIDATE_UID}: {exc}"
    if proc.returncode == 3:
        return f"uid {CANDIDATE_UID} could reach the grader's files ({proc.stdout.decode(errors='replace').strip()})"
    if proc.returncode != 0:
        return f"the interpreter does not run as uid {CANDIDATE_UID}: {proc.stderr.decode(errors='replace')[-200:]}"
    return None


def _unprivileged_python_works() -> bool:
    """Whether the interpreter (and numpy) can run as nobody (root-only installs cannot)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import numpy"],
            capture_output=True,
            timeout=60,
            preexec_fn=_drop_privileges,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _bwrap_flags() -> list[str] | None:
    """Namespace flags of the candidate's sandbox, or None where bwrap cannot build it.

    Every variant has its own user, PID, network, IPC and UTS namespaces and its own
    /proc; the first also disables further user namespaces (bwrap >= 0.8). There is no
    weaker variant: without a PID namespace the candidate would reach the grader's
    files through /proc/<pid>/root.
    """
    if _BWRAP_VARIANT:
        return _BWRAP_VARIANT[0] or None
    full = ["--unshare-all", "--unshare-user", "--proc", "/proc", "--cap-drop", "ALL"]
    variants = [[*full, "--disable-userns"], full]
    if shutil.which("bwrap") is None:
        _BWRAP_VARIANT.append([])
        return None
    for flags in variants:
        argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", *flags, "--die-with-parent", "true"]
        try:
            ok = subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            _BWRAP_VARIANT.append(flags)
            return flags
    _BWRAP_VARIANT.append([])
    return None


def _python_roots() -> list[Path]:
    """Directories the interpreter needs: its prefixes and every existing sys.path root."""
    roots = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent)
    for entry in sys.path:
        # only package directories: sys.path[0] is the grader's own folder and must stay unseen
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            roots.add(Path(os.path.realpath(entry)))
    # keep only outermost roots
    ordered = sorted(roots, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for root in ordered:
        if not any(k == root or k in root.parents for k in kept):
            kept.append(root)
    return kept


def _bwrap_argv(
    app_dir: Path,
    assets_dir: str | Path | None,
    scratch: Path,
    forbidden: list[str],
    app_mount: str,
    assets_mount: str,
) -> list[str]:
    flags = _bwrap_flags() or []
    argv = ["bwrap", "--die-with-parent", "--new-session", *flags, "--dev", "/dev"]
    argv += ["--size", str(NESTED_TMP_BYTES), "--tmpfs", "/tmp"]
    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"):
        if os.path.exists(system):
            argv += ["--ro-bind", system, system]
    for root in _python_roots():
        argv += ["--ro-bind", str(root), str(root)]
    argv += _mask_forbidden(forbidden)
    argv += ["--ro-bind", str(app_dir.resolve()), app_mount]
    if assets_dir is not None and Path(assets_dir).exists():
        argv += ["--ro-bind", str(Path(assets_dir).resolve()), assets_mount]
    argv += ["--bind", str(scratch), "/scratch"]
    return argv


def _mask_forbidden(forbidden: list[str]) -> list[str]:
    """Re-create each site directory holding a forbidden package without it (physically absent)."""
    args: list[str] = []
    seen: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        site = os.path.realpath(entry)
        if site in seen:
            continue
        seen.add(site)
        names = os.listdir(site)
        if not any(_is_forbidden(n, forbidden) for n in names):
            continue
        args += ["--tmpfs", site]
        for name in sorted(names):
            if not _is_forbidden(name, forbidden):
                args += ["--ro-bind", os.path.join(site, name), os.path.join(site, name)]
    return args


def _is_forbidden(name: str, forbidden: list[str]) -> bool:
    """A site-packages entry that belongs to a forbidden package (or its bundled helpers)."""
    stem = name.lower().split("-")[0].split(".")[0]
    aliases = set(forbidden)
    if "torch" in aliases:
        aliases |= {"functorch", "torchgen"}
    return stem in aliases
