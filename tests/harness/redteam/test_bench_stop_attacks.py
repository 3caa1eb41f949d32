"""A bench stopped by an attacker's trial or by SIGKILL: it neither waits forever nor leaves a trial running.

A trial that ignores the SIGTERM its bench sends it (a `twin migrate` started where SIGTERM was
already ignored keeps ignoring it, and one stuck in its clean-up never gets to it) must not hold
the stopped bench forever; and a bench killed outright (SIGKILL, an OOM kill) must not leave its
trials running on, where the next bench would resume the same run directories beside them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from harness.bench import trial_processes
from harness.bench.executors import run_locally
from harness.bench.trials import KILLED_AT_STOP

IGNORES_SIGTERM = (
    "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', os.getpid(), flush=True); time.sleep(120)"
)


class _Unbounded:
    def check(self) -> None:
        """The bench's ledger with budget left."""


def test_a_stopped_bench_does_not_wait_forever_on_a_trial_that_ignores_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(trial_processes, "STOP_GRACE_S", 1.0, raising=False)
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
                        _Unbounded())  # fmt: skip
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


def test_a_trial_stops_when_its_bench_is_killed(tmp_path):
    """SIGKILL to the bench alone: its trial is sent SIGTERM by the kernel and stops as it would at a stop."""
    out = tmp_path / "trial.txt"
    trial = (
        "import os, signal, sys, time; from pathlib import Path; out = Path(sys.argv[1]);"
        " signal.signal(signal.SIGTERM, lambda n, f: (out.write_text('stopped'), sys.exit(130)));"
        " out.write_text(f'ready {os.getpid()}'); time.sleep(60)"
    )
    bench = (
        "import sys, threading; from pathlib import Path; from harness.bench.trials import start_trial_process;"
        f" t = threading.Thread(target=lambda: start_trial_process([sys.executable, '-c', {trial!r}, {str(out)!r}],"
        f" Path({str(tmp_path / 'trial.log')!r}), {{}}).wait()); t.start(); t.join()"
    )
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen([sys.executable, "-c", bench], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text().startswith("ready")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text().startswith("ready")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while out.read_text().startswith("ready") and time.monotonic() < deadline:
        time.sleep(0.05)
    left = out.read_text()
    if left.startswith("ready"):  # the attack held: end the orphaned trial by its pid
        os.kill(int(left.split()[1]), signal.SIGKILL)
    assert left == "stopped", "the trial runs on after its bench was killed"
