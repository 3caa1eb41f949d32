"""A bench stopped by an attacker's trial or by SIGKILL: it neither waits forever nor leaves a trial running.

A trial that ignores the SIGTERM its bench sends it (a `twin migrate` started where SIGTERM was
already ignored keeps ignoring it, and one stuck in its clean-up never gets to it) must not hold
the stopped bench forever; and a bench killed outright (SIGKILL, an OOM kill) must not leave its
trials running on, where the next bench would resume the same run directories beside them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.bench import trials
from harness.bench.executors import run_locally
from harness.bench.trials import KILLED_AT_STOP
from tests.harness.test_executors import Unbounded

IGNORES_SIGTERM = (
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', os.getpid(), flush=True); time.sleep(120)"
)


def test_a_stopped_bench_does_not_wait_forever_on_a_trial_that_ignores_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(trials, "STOP_GRACE_S", 1.0)
    stubborn = tmp_path / "stubborn"
    commands = {
        "stubborn": [sys.executable, "-c", IGNORES_SIGTERM],
        "quick": ["sh", "-c", f"until grep -q ready {stubborn}.log; do sleep 0.05; done"],
    }
    recorded = []

    def record(spec, code, started, inner_s):
        recorded.append((spec, code))
        if spec == "quick":
            raise KeyboardInterrupt  # the bench is stopped once the stubborn trial ignores SIGTERM
        return SimpleNamespace(status="stopped", attempts=0)

    config = SimpleNamespace(jobs=2, infra_retries=0, retry_backoff_s=0)
    outcome = []

    def bench() -> None:
        try:
            run_locally(config, ["stubborn", "quick"], lambda s: (commands[s], tmp_path / s), record, dict(os.environ),
                        Unbounded())  # fmt: skip
        except KeyboardInterrupt:
            outcome.append("stopped")

    runner = threading.Thread(target=bench, daemon=True)
    runner.start()
    runner.join(30)
    if runner.is_alive():  # the attack held: end the stubborn trial (its pid is in its log), nothing outlives the test
        os.kill(int((tmp_path / "stubborn.log").read_text().split()[1]), signal.SIGKILL)
    assert not runner.is_alive(), "the stopped bench still waits on a trial that ignores SIGTERM"
    assert outcome == ["stopped"]
    assert recorded == [("quick", 0), ("stubborn", KILLED_AT_STOP)]
    assert "did not stop within 1 s of SIGTERM" in (tmp_path / "stubborn.log").read_text()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="the trial is tied to its bench by setpriv --pdeathsig")
def test_a_trial_stops_when_its_bench_is_killed(tmp_path):
    """SIGKILL to the bench alone: its trial is sent SIGTERM by the kernel and stops as it would at a stop."""
    out = tmp_path / "trial.txt"
    trial = (
        "import os, signal, sys, time; from pathlib import Path; out = Path(sys.argv[1]);"
        " signal.signal(signal.SIGTERM, lambda n, f: (out.write_text('stopped'), sys.exit(130)));"
        " out.write_text(f'ready {os.getpid()}!'); time.sleep(60)"
    )
    bench = (
        "import sys, threading; from pathlib import Path; from harness.bench.trials import start_trial_process;"
        f" t = threading.Thread(target=lambda: start_trial_process([sys.executable, '-c', {trial!r}, {str(out)!r}],"
        f" Path({str(tmp_path / 'trial.log')!r}), {{}}).wait()); t.start(); t.join()"
    )
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, "-c", bench], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text().endswith("!")) and time.monotonic() < deadline:
        time.sleep(0.05)
    ready = out.read_text()
    assert ready.startswith("ready") and ready.endswith("!"), ready
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while out.read_text() != "stopped" and time.monotonic() < deadline:  # (read whole: never mid-write)
        time.sleep(0.05)
    left = out.read_text()
    if left != "stopped":  # the attack held: end the orphaned trial by its pid
        os.kill(int(ready.split()[1].rstrip("!")), signal.SIGKILL)
    assert left == "stopped", "the trial runs on after its bench was killed"


def test_a_second_bench_on_the_same_directory_is_refused_while_the_first_runs(tmp_path, monkeypatch):
    """Run again while the first still runs (or stops), a bench would resume the same trials beside it."""
    from harness.bench import run as bench_run
    from harness.bench.directory import BenchDir
    from harness.bench.schema import BenchConfig, BenchError
    from tests.harness import loop_scripts as plans

    root = tmp_path / "benches" / "b"
    root.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from harness.bench.directory import BenchDir; from pathlib import Path;"
         f" h = BenchDir(Path({str(root)!r})).held(); h.__enter__(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(bench_run, "run_locally", lambda *a: pytest.fail("a trial ran beside the other bench"))
        config = BenchConfig(name="b", tasks=[plans.TINY_TASK], models=["scripted:none.json"], scaffolds=["base"])
        with pytest.raises(BenchError, match="is being run by another twin bench"):
            bench_run.run_bench(config, tmp_path / "benches")
        assert not (root / "results.json").exists()  # nothing of the other bench's rewritten
    finally:
        holder.stdin.close()
        holder.wait()
    with BenchDir(root).held():  # released with the process that held it
        pass


def test_a_trial_its_stopped_bench_killed_is_recorded_stopped_for_resuming(tmp_path):
    from harness.bench.schema import TrialSpec
    from harness.bench.trials import collect_trial
    from harness.run.directory import RunDir, RunState
    from tests.harness import loop_scripts as plans

    spec = TrialSpec(task=plans.TINY_TASK, model="scripted:x", scaffold="twin", seed=0)
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.save_state(RunState(run_id="run", status="running"))  # killed mid-run: its state never said stopped
    result = collect_trial(spec, run.root, KILLED_AT_STOP, attempts=1, rounds=2)
    assert result.status == "stopped"
    assert result.stop_reason == "killed by its bench: it did not stop in time after SIGTERM"
    assert collect_trial(spec, run.root, -9, attempts=1, rounds=2).status == "failed"  # a kill not the bench's
