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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.grading.check import _passed_marker, ensure_task_checked, task_content_hash  # noqa: E402
from task_model.loader import load_task  # noqa: E402

GOALS_S = {"not cached": 30.0, "cached": 5.0}
TASKS = ("mlp-train", "llama-lora-sft", "llama-paged-serve")
LIMIT_S = 600.0


def cpu_s(pid: int) -> float:
    """CPU seconds of process `pid` and its reaped children so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def first_call_s(task_dir: Path, sandbox: str, work: Path) -> tuple[float, float]:
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
    log = (work / "twin.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job ignores Ctrl-C
    )
    try:
        while not (inbox / "request-1.json").exists():
            if proc.poll() is not None:
                tail = (work / "twin.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"twin migrate ended (exit {proc.returncode}) before a model call:\n{tail}")
            if time.monotonic() - started > LIMIT_S:
                raise SystemExit(f"no model call within {LIMIT_S:.0f} s")
            time.sleep(0.05)
        return time.monotonic() - started, cpu_s(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)  # twin alone: it stops its children and releases the candidate itself
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def remove(work: Path) -> None:
    """Remove a run's scratch; an interrupted run may still be releasing its candidate's filesystem."""
    for _ in range(60):
        shutil.rmtree(work, ignore_errors=True)
        if not work.exists():
            return
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sandbox", default="bwrap")
    args = parser.parse_args()
    missed = 0
    rows = []
    for name in args.tasks:
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
    print(f"\n{'task':18s} {'check':10s} {'min s':>7s} {'median s':>9s} {'cpu s':>6s}  goal (on the median)")
    for name, case, low, median, cpu in rows:
        ok = median <= GOALS_S[case]
        missed += not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{name:18s} {case:10s} {low:7.1f} {median:9.1f} {cpu:6.1f}  <= {GOALS_S[case]:.0f} s  {verdict}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) on {os.cpu_count()} cores")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
