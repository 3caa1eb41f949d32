"""Seconds from `twin migrate` starting to its first model call, with the task check cached and not.

    python benchmarks/first_model_call.py [--tasks mlp-train ...] [--repeats 2] [--sandbox bwrap]

For each bundled task (`tasks/t2j-mini/*`), `twin migrate` is started as a user
starts it, with `--model inbox:DIR`: the first model call is the moment twin writes
`DIR/request-1.json`, which the benchmark watches for. The run is then interrupted
(the model call is never answered). "not cached": the task check's remembered pass is
removed first, so the check (oracle and empty candidate through the task's grader)
runs; "cached": a pass is remembered (made first, untimed, where there is none). One
untimed run per task comes first: twin's caches of the interpreter and the task (made
once per machine, and shared by every run) are not what is measured.

Prints each time (wall, and CPU of twin's process) and the min and median per task and
case against the goals (30 s not cached, 5 s cached), with the machine's load; exit
status 1 when a median misses a goal. On a busy machine the CPU time says what twin
itself spends; the wall time what a user waits.

    python benchmarks/first_model_call.py --fresh-cache [--tasks mlp-train litgpt-lora]

measures instead what a new user, a CI job or a bench worker waits for on a new cache: each
measurement gets an empty `TWIN_CACHE_DIR` of its own (under /var/tmp, removed after), with
only the declared originals' wheels put in it first (as `twin task fetch` at set-up leaves
them; no index is needed). "first call": `twin migrate` until its first model call. "check
start": `twin task check --no-defects` until the grader's `test.sh` starts in its sandbox (a
`bash` process running it, under twin's). Goal: 30 s each. Nothing is untimed there: the
sandboxes' site-packages, the interpreter's and the task's cached trees are all built anew.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.grading.check import _passed_marker, ensure_task_checked, task_content_hash  # noqa: E402
from ground.sandboxes.owner import descendants  # noqa: E402
from task_model.loader import load_task  # noqa: E402

GOALS_S = {"not cached": 30.0, "cached": 5.0, "first call": 30.0, "check start": 30.0}
TASKS = ("mlp-train", "llama-lora-sft", "llama-paged-serve")
FRESH_TASKS = ("mlp-train", "litgpt-lora")
LIMIT_S = 600.0


def cpu_s(pid: int) -> float:
    """CPU seconds of process `pid` and its reaped children so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def first_call_s(task_dir: Path, sandbox: str, work: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Start `twin migrate` on `task_dir`; (wall, CPU) seconds until it asks its first model call (then stop it).

    The CPU time is twin's process and the children it has reaped by then (a check still
    grading beside the run is not in it).
    """
    inbox = work / "inbox"
    inbox.mkdir(parents=True)
    argv = [
        str(REPO / ".venv" / "bin" / "twin"), "migrate", "--task", str(task_dir), "--model", f"inbox:{inbox}",
        "--sandbox", sandbox, "--runs-dir", str(work / "runs"), "--no-grade", "--rounds", "1",
    ]  # fmt: skip
    with _started(argv, work, env) as (proc, started):
        waited = _wait_until(lambda: (inbox / "request-1.json").exists(), proc, started, work,
                             "twin migrate ended", "a model call", "no model call")  # fmt: skip
        return waited, cpu_s(proc.pid)


def _runs_test_sh(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return Path(argv[0].decode(errors="replace")).name == "bash" and any(a.endswith(b"test.sh") for a in argv)


def check_start_s(task_dir: Path, sandbox: str, work: Path, env: dict[str, str]) -> float:
    """Start `twin task check` on `task_dir`; wall seconds until its grader's test.sh starts (then stop it)."""
    argv = [str(REPO / ".venv" / "bin" / "twin"), "task", "check", str(task_dir), "--no-defects", "--sandbox", sandbox]
    with _started(argv, work, env) as (proc, started):
        return _wait_until(lambda: any(_runs_test_sh(pid) for pid in descendants(proc.pid)), proc, started, work,
                           "twin task check ended", "its grader started", "no grader started")  # fmt: skip


@contextmanager
def _started(argv: list[str], work: Path, env: dict[str, str] | None) -> Iterator[tuple[subprocess.Popen, float]]:
    """twin started in a session of its own, logging to `work/twin.log`; stopped by Ctrl-C (SIGINT) at the end,
    as a user would stop it: twin alone, which stops its children and releases the candidate itself."""
    log = (work / "twin.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job ignores Ctrl-C
        env=env,
    )
    try:
        yield proc, started
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _wait_until(done: Callable[[], bool], proc: subprocess.Popen, started: float, work: Path, ended: str,
                before: str, missing: str) -> float:  # fmt: skip
    """Wall seconds from `started` until `done()`; SystemExit (with twin's last log lines) if twin ends first,
    or after `LIMIT_S`."""
    while not done():
        if proc.poll() is not None:
            tail = (work / "twin.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"{ended} (exit {proc.returncode}) before {before}:\n{tail}")
        if time.monotonic() - started > LIMIT_S:
            raise SystemExit(f"{missing} within {LIMIT_S:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - started


def fresh_cache(task_dir: Path) -> Path:
    """A new, empty cache directory with only the task's declared original's wheel in it (if it declares one)."""
    from ground.host_dirs import cache_root
    from task_model.distribution_install import task_declaration

    cache = Path(tempfile.mkdtemp(prefix="twin-fresh-cache-", dir="/var/tmp"))
    cache.chmod(0o755)
    original = task_declaration(task_dir)
    if original is not None:
        kept = cache_root() / "distributions" / original.sha256 / original.wheel
        if kept.is_file():
            (cache / "distributions" / original.sha256).mkdir(parents=True)
            for folder in (cache / "distributions", cache / "distributions" / original.sha256):
                folder.chmod(0o755)
            shutil.copy2(kept, cache / "distributions" / original.sha256 / original.wheel)
        else:
            print(f"note: {original.wheel} is not in {cache_root()}: twin fetches it from the index", flush=True)
    return cache


def task_path(name: str) -> Path:
    """A bundled task by name: tasks/t2j-mini/NAME, else tasks/NAME."""
    mini = REPO / "tasks" / "t2j-mini" / name
    return mini if mini.is_dir() else REPO / "tasks" / name


def fresh_rows(tasks: list[str], sandbox: str, repeats: int) -> list[tuple[str, str, float, float, float]]:
    """Each task's first call and check start, each on a fresh cache; rows as `main` prints them."""
    rows = []
    for name in tasks:
        task_dir = task_path(name)
        for case in ("first call", "check start"):
            times, cpus = [], []
            for _ in range(repeats):
                cache, work = fresh_cache(task_dir), Path(tempfile.mkdtemp(prefix="twin-first-call-"))
                env = {**os.environ, "TWIN_CACHE_DIR": str(cache)}
                try:
                    if case == "first call":
                        wall, cpu = first_call_s(task_dir, sandbox, work, env)
                    else:
                        wall, cpu = check_start_s(task_dir, sandbox, work, env), float("nan")
                finally:
                    remove(work)
                    remove(cache)
                times.append(wall)
                cpus.append(cpu)
                print(f"{name:18s} {case:11s} {wall:6.1f} s, cpu {cpu:5.1f} s  (fresh cache, load "
                      f"{os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
            rows.append((name, case, min(times), statistics.median(times), statistics.median(cpus)))
    return rows


def remove(work: Path) -> None:
    """Remove a run's scratch; an interrupted run may still be releasing its candidate's filesystem."""
    for _ in range(60):
        shutil.rmtree(work, ignore_errors=True)
        if not work.exists():
            return
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--fresh-cache", action="store_true", help="first call and check start on new caches")
    args = parser.parse_args()
    missed = 0
    rows = []
    if args.fresh_cache:
        rows = fresh_rows(args.tasks or list(FRESH_TASKS), args.sandbox, args.repeats)
    for name in [] if args.fresh_cache else args.tasks or list(TASKS):
        task_dir = REPO / "tasks" / "t2j-mini" / name
        task = load_task(task_dir)
        marker = _passed_marker(task_content_hash(task), args.sandbox)
        # untimed: what only a first run on this machine makes (the interpreter's and the task's
        # cached copies) is not what is measured here
        work = Path(tempfile.mkdtemp(prefix="twin-first-call-"))
        try:
            first_call_s(task_dir, args.sandbox, work)
        finally:
            remove(work)
        for case in ("not cached", "cached"):
            times, cpus = [], []
            for _ in range(args.repeats):
                if case == "not cached":
                    marker.unlink(missing_ok=True)
                else:
                    ensure_task_checked(task, args.sandbox)  # untimed: a pass to remember
                work = Path(tempfile.mkdtemp(prefix="twin-first-call-"))
                try:
                    wall, cpu = first_call_s(task_dir, args.sandbox, work)
                finally:
                    remove(work)
                times.append(wall)
                cpus.append(cpu)
                print(
                    f"{name:18s} {case:10s} {wall:6.1f} s, cpu {cpu:5.1f} s  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            rows.append((name, case, min(times), statistics.median(times), statistics.median(cpus)))
    print(f"\n{'task':18s} {'case':11s} {'min s':>7s} {'median s':>9s} {'cpu s':>6s}  goal (on the median)")
    for name, case, low, median, cpu in rows:
        ok = median <= GOALS_S[case]
        missed += not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{name:18s} {case:11s} {low:7.1f} {median:9.1f} {cpu:6.1f}  <= {GOALS_S[case]:.0f} s  {verdict}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) on {os.cpu_count()} cores")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
