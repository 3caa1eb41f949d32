"""A stopped bench stops each running trial once, starts no more, and records a stopped trial for resuming."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ground.errors import Interrupted
from harness.bench.schema import TrialSpec
from harness.bench.trial_processes import TrialProcesses
from harness.bench.trials import collect_trial
from harness.run.directory import RunDir, RunState
from tests.harness import loop_scripts as plans

COUNTING = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
got = []
signal.signal(signal.SIGTERM, lambda n, f: got.append(n))
out.write_text("ready")
while not got:
    time.sleep(0.02)
out.write_text("stopping")
time.sleep(0.5)  # a second SIGTERM from the bench would land here
out.write_text(str(len(got)))
sys.exit(130)
"""


def test_a_stop_sends_each_running_trial_sigterm_once_and_starts_no_more(tmp_path):
    processes = TrialProcesses()
    marks = [tmp_path / f"trial-{i}.txt" for i in range(2)]
    env = dict(os.environ)
    with ThreadPoolExecutor(max_workers=3) as pool:
        running = [
            pool.submit(processes.run, [sys.executable, "-c", COUNTING, str(mark)], tmp_path / f"{mark.stem}.log", env)
            for mark in marks
        ]
        deadline = time.monotonic() + 60
        while not all(m.exists() and m.read_text() == "ready" for m in marks) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.stop() == 2
        while not all(m.read_text() == "stopping" for m in marks) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert processes.stop() == 0  # a second stop (a second signal to the bench) reaches no trial again
        ended = [future.result(timeout=60) for future in running]
        late = pool.submit(processes.run, [sys.executable, "-c", COUNTING, str(tmp_path / "late.txt")],
                           tmp_path / "late.log", env).result(timeout=60)  # fmt: skip
    assert [code for code, _ in ended] == [130, 130]
    assert all(seconds > 0.5 for _, seconds in ended)
    assert [m.read_text() for m in marks] == ["1", "1"]  # one SIGTERM each
    assert late == (None, 0.0) and not (tmp_path / "late.txt").exists() and not (tmp_path / "late.log").exists()


def _spec() -> TrialSpec:
    return TrialSpec(task=plans.TINY_TASK, model="scripted:x", scaffold="twin", seed=0)


def test_a_trial_saved_as_stopped_is_stopped_not_failed(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.save_state(RunState(run_id="run", status="stopped", stop_reason="stopped by SIGTERM"))
    result = collect_trial(_spec(), run.root, Interrupted.exit_code, attempts=1, rounds=2)
    assert (result.status, result.stop_reason, result.rewards) == ("stopped", "stopped by SIGTERM", {})


def test_a_trial_ended_by_the_signal_while_starting_is_stopped(tmp_path):
    result = collect_trial(_spec(), tmp_path / "never-started", -15, attempts=1, rounds=2)
    assert (result.status, result.stop_reason) == ("stopped", "stopped (twin migrate exited -15)")
    killed = collect_trial(_spec(), tmp_path / "never-started", -9, attempts=1, rounds=2)
    assert killed.status == "failed"  # SIGKILL (the kernel's OOM killer, say) is no stop of the bench's
