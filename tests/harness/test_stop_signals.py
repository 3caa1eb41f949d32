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
from harness.cli.stop_signals import HELD_OFF, stopping_on_signals
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


@pytest.fixture
def python_sigint_handler():
    """Python's Ctrl-C handler, also where the tests were started with SIGINT ignored (`pytest &` in a script)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_then_any_stop_signal_does_not_cut_the_clean_stop_short(python_sigint_handler):
    done = []
    with pytest.raises(KeyboardInterrupt) as info, stopping_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        finally:  # a scheduler's SIGTERM, a second Ctrl-C: the clean-up goes on
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("cleaned up")
    assert done == ["cleaned up"] and not isinstance(info.value, StopSignal)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_command_line_keeps_ignoring_signals_after_a_stop_until_it_exits():
    before = {number: signal.getsignal(number) for number in HELD_OFF}
    try:
        with pytest.raises(StopSignal), stopping_on_signals(restore_after_stop=False):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        os.kill(os.getpid(), signal.SIGTERM)  # as the process exits: not ended by its default action
        time.sleep(0.05)
        assert all(signal.getsignal(number) is signal.SIG_IGN for number in HELD_OFF)
        for number, handler in before.items():
            signal.signal(number, handler)
        with stopping_on_signals(restore_after_stop=False):  # no stop: put back as always
            assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        assert {number: signal.getsignal(number) for number in HELD_OFF} == before
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_a_signal_ignored_when_twin_starts_stays_ignored():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts twin
    try:
        with stopping_on_signals():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)  # nothing raised: the terminal closing does not stop a nohup'd twin
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


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


def _sleeping(run: RunDir) -> list[int]:
    """The Migrator's `sleep 15`, once it runs (asked for in the trajectory, a process of that name)."""
    if not (run.trajectory.exists() and '"sleep 15"' in run.trajectory.read_text()):
        return []
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry / "cmdline").read_bytes() == b"sleep\x0015\x00":
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.heavy  # a run stopped by a signal mid-command, then resumed
@pytest.mark.skipif(unavailable(EXT4) is not None, reason=f"no capped candidate here: {unavailable(EXT4)}")
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signalled_run_releases_its_mount_is_saved_stopped_and_resumes(tmp_path, stage, number):
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
        while time.time() < deadline and not _sleeping(run):  # signal while the slow command runs in its sandbox
            time.sleep(0.2)
        assert _sleeping(run), "the Migrator's slow command runs"
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


GROUP_LEADER = """
import subprocess, sys, time
from harness.cli.stop_signals import stopping_on_signals
from ground.errors import StopSignal
child = subprocess.Popen(["sleep", "30"])  # in this process's group, as a bench's trial is
with open(sys.argv[1], "w") as pid:
    pid.write(str(child.pid))
try:
    with stopping_on_signals():
        time.sleep(30)
except StopSignal as stop:
    print(stop.name, child.wait(timeout=10))
"""


@pytest.mark.parametrize("leader", [True, False], ids=["own-group", "parent-s-group"])
def test_a_twin_leading_its_group_passes_the_stop_on_to_it_and_only_then(tmp_path, leader):
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen(
        [sys.executable, "-c", GROUP_LEADER, str(pid_file)], cwd=REPO, start_new_session=leader, stdout=subprocess.PIPE
    )
    try:
        deadline = time.time() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the handlers are set
        proc.send_signal(signal.SIGTERM)
        if leader:
            out, _ = proc.communicate(timeout=20)
            assert out.decode().split() == ["SIGTERM", str(-signal.SIGTERM)]  # the child got it too
        else:
            time.sleep(0.5)
            os.kill(int(pid_file.read_text()), 0)  # the child runs on: the group is not this twin's
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        subprocess.run(["kill", "-9", pid_file.read_text()], capture_output=True)


def test_a_stop_inside_a_command_that_does_not_handle_it_still_says_one_line(monkeypatch, capsys):
    """typer turns a KeyboardInterrupt inside a command into a bare exit 130: twin says how it was stopped."""
    import typer

    from harness.cli import app as cli_app
    from harness.cli import stop_signals

    stand_in = typer.Typer()

    @stand_in.command()
    def slow() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # e.g. while a task loads, before any command's own handling
        time.sleep(5)

    @stand_in.command()
    def other() -> None:
        pass

    monkeypatch.setattr(cli_app, "app", stand_in)
    monkeypatch.setattr(stop_signals, "_received", [], raising=False)
    before = {number: signal.getsignal(number) for number in HELD_OFF}
    try:
        assert cli_app.main(["slow"]) == 130
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    assert capsys.readouterr().err.strip() == "stopped by SIGTERM"
