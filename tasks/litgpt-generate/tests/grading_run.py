"""Running the candidate: a grader-written driver after a fixed prelude, its outputs read back.

Part of the grading library (`grading.py` is its face and documents the driver's names).
numpy and the standard library only; every task carries an identical copy beside `grading.py`.
"""

from __future__ import annotations

import functools
import io
import json
import os
import selectors
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
from grading_sandbox import (
    _bwrap_argv,
    _choose_isolation,
    _drop_privileges,
    candidate_uid,
    end_candidate_session,
    hand_scratch_to_candidate,
    remove_scratch,
)

OUTPUT_LIMIT = 256 << 20  # bytes of one output file of the candidate's run
LOG_BYTES = 64 << 10  # of the driver's stdout and stderr, the tail kept
DRAIN_S = 5.0  # how long the driver's output is read once it has ended (a pipe a survivor holds)


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


_PRELUDE = r"""
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
"""

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
    settings = dict(app_dir=app_dir, assets_dir=assets_dir, inputs=inputs, json_inputs=json_inputs,
                    timeout_s=timeout_s, forbidden=forbidden, app_mount=app_mount, assets_mount=assets_mount,
                    env=env)  # fmt: skip
    mode = _choose_isolation(isolation)
    if mode != "uid":
        return _run(driver, None, mode, **settings)
    with candidate_uid() as uid:  # a uid of its own, its processes ended before and after the run
        return _run(driver, uid, mode, **settings)


def _run(driver: str, uid: int | None, mode: str, *, app_dir, assets_dir, inputs, json_inputs, timeout_s,
         forbidden, app_mount, assets_mount, env) -> CandidateRun:  # fmt: skip
    forbidden = sorted(set(forbidden))
    scratch = Path(tempfile.mkdtemp(prefix="t2j-run-"))  # 0700, root's until it is handed over
    try:
        inside_scratch = "/scratch"
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
            preexec = functools.partial(_drop_privileges, uid) if uid is not None else None
        if uid is not None:
            hand_scratch_to_candidate(scratch, uid)  # filled first, then the candidate's, through descriptors
        else:
            os.chmod(scratch, 0o777)  # the nested sandbox's uid (never a process outside it) writes there
        started = time.monotonic()
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
            out, timed_out = _wait_with_output(proc, timeout_s, uid)
        finally:  # also when reading failed: before root reads or removes anything the candidate wrote
            _kill_group(proc)
            if uid is not None:
                end_candidate_session(uid)
            proc.wait()
            proc.stdout.close()
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


def _wait_with_output(proc: subprocess.Popen, timeout_s: float, uid: int | None) -> tuple[bytes, bool]:
    """The tail of the driver's output and whether the time limit killed it.

    The driver's end, not its pipe's, ends the wait: a process it left behind holding the pipe
    (`setsid`) is killed with the whole uid (or the nested sandbox's PID namespace) when the driver
    ends or times out, and its pipe is read for at most `DRAIN_S` more.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    tail = bytearray()
    deadline = time.monotonic() + timeout_s
    timed_out, eof = False, False
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if eof:
                try:
                    proc.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    pass
                continue
            if selector.select(min(left, 1.0)):
                eof = _read_some(fd, tail)
        _kill_group(proc)
        if uid is not None:
            end_candidate_session(uid)
        drain = time.monotonic() + DRAIN_S
        while not eof and (left := drain - time.monotonic()) > 0:
            if selector.select(left):
                eof = _read_some(fd, tail)
    return bytes(tail), timed_out


def _read_some(fd: int, tail: bytearray) -> bool:
    """Read what is there into `tail` (its last `LOG_BYTES` kept); True at the end of the pipe."""
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    tail += chunk
    del tail[:-LOG_BYTES]
    return not chunk


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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            proc.kill()
