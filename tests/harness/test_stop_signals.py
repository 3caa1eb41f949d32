"""SIGTERM and SIGHUP stop twin as Ctrl-C does: a `kill PID` of `twin migrate` leaves no mount behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ground.errors import StopSignal
from ground.sandboxes.quota import EXT4, recover_capped, unavailable
from harness.cli.app import main
from harness.cli.stop_signals import stopping_on_signals
from harness.run.directory import RunDir
from tests.harness import loop_scripts as plans

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_is_raised_as_ctrl_c_and_the_handlers_are_put_back(number):
    before = signal.getsignal(number)
    with pytest.raises(KeyboardInterrupt) as info, stopping_on_signals():
        os.kill(os.getpid(), number)
        time.sleep(5)  # never reached: the handler raises as soon as the signal arrives
    assert isinstance(info.value, StopSignal) and info.value.name == signal.Signals(number).name
    assert signal.getsignal(number) is before


def test_a_second_stop_signal_does_not_cut_the_clean_stop_short():
    done = []
    with pytest.raises(StopSignal), stopping_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:  # the clean-up a first signal started
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            done.append("cleaned up")
    assert done == ["cleaned up"]


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/mounts") as mounts:
        return [line for line in mounts if str(path) in line.split()[1]]


def _loops_under(path: Path) -> list[str]:
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if str(path) in line]


def _left_in_session(session: int) -> list[int]:
    """Processes still running in the session a stopped twin led (its sandboxes included; an exited
    one that no init here reaps is not running)."""
    left = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # after the name: state, ppid, pgrp, session
            left.append(int(entry.name))
    return left


@pytest.mark.heavy  # a run stopped by a signal mid-command, then resumed
@pytest.mark.skipif(unavailable(EXT4) is not None, reason=f"no capped candidate here: {unavailable(EXT4)}")
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signalled_run_releases_its_mount_is_saved_stopped_and_resumes(tmp_path, monkeypatch, number):
    stage = tmp_path / "stage"  # the run's capped-filesystem records and images: this test's own
    monkeypatch.setenv("TWIN_STAGE_DIR", str(stage))
    model = plans.write_script(tmp_path / "script.json", plans.twin_with_slow_migration(15))
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "harness.cli.app", "migrate", "--task", str(plans.TINY_TASK), "--model", model]
    command += ["--rounds", "2", "--runs-dir", str(runs), "--run-id", "s"]
    proc = subprocess.Popen(
        command, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    run = RunDir(runs / "s")
    try:
        deadline = time.time() + 180
        while time.time() < deadline:  # signal while the Migrator's slow command runs in its sandbox
            if run.trajectory.exists() and '"sleep 15"' in run.trajectory.read_text():
                break
            time.sleep(0.2)
        time.sleep(1)
        assert os.path.ismount(run.candidate) and _loops_under(stage), "the candidate is capped while it runs"
        proc.send_signal(number)  # to twin alone, as a scheduler or a closed terminal does
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        name = signal.Signals(number).name
        assert f"stopped by {name}; continue with: twin migrate --resume" in err.decode()
        assert _mounts_under(tmp_path) == [] and _loops_under(stage) == []
        assert _left_in_session(proc.pid) == []
        state = run.load_state()
        assert state.status == "stopped" and state.stop_reason == f"stopped by {name}"
        assert (run.candidate / "calc" / "ops.py").exists()  # the work done so far, on the host's disk
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        recover_capped()  # what a failed stop left (nothing, where the test passed) is released here
    assert main(["migrate", "--resume", "s", "--runs-dir", str(runs)]) == 0  # the slow command runs anew
    state = run.load_state()
    assert state.status == "finished" and state.final_round == 2
    assert _mounts_under(tmp_path) == []
