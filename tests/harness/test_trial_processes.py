"""A stopped bench stops each running trial once, starts no more, and records a stopped trial for resuming."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ground.errors import Interrupted
from ground.sandboxes.owner import descendants, process_tag
from ground.sandboxes.quota import EXT4, recover_capped, unavailable
from harness.bench.directory import BenchDir
from harness.bench.schema import TrialSpec
from harness.bench.trial_processes import TrialProcesses
from harness.bench.trials import collect_trial
from harness.cli.app import main
from harness.run.directory import RunDir, RunState
from tests.harness import loop_scripts as plans
from tests.harness.test_stop_signals import _left_in_session, _loops_under, _mounts_under

REPO = Path(__file__).resolve().parents[2]

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
    state = RunState(run_id="run", status="stopped", stop_reason="stopped by SIGTERM")
    state.spent.calls, state.spent.tokens_in, state.spent.tokens_out = 3, 300, 60
    run.save_state(state)
    result = collect_trial(_spec(), run.root, Interrupted.exit_code, attempts=1, rounds=2)
    assert (result.status, result.stop_reason, result.rewards) == ("stopped", "stopped by SIGTERM", {})
    assert (result.calls, result.tokens) == (3, 360)  # what it had spent when it stopped
    run.save_state(RunState(run_id="run", status="finished", stop_reason="all established"))
    grading = collect_trial(_spec(), run.root, Interrupted.exit_code, attempts=1, rounds=2)  # stopped while grading
    assert (grading.status, grading.stop_reason) == ("stopped", "stopped (twin migrate exited 130)")


def test_a_trial_ended_by_the_signal_while_starting_is_stopped(tmp_path):
    result = collect_trial(_spec(), tmp_path / "never-started", -15, attempts=1, rounds=2)
    assert (result.status, result.stop_reason) == ("stopped", "stopped (twin migrate exited -15)")
    killed = collect_trial(_spec(), tmp_path / "never-started", -9, attempts=1, rounds=2)
    assert killed.status == "failed"  # SIGKILL (the kernel's OOM killer, say) is no stop of the bench's


# A whole `twin bench` stopped by a signal while two trials run a command in their sandboxes, then resumed.

GUARDED_SLEEP = "touch /app/.slept; [ -e /source/.resumed ] || sleep 297"
"""The slow command. A resumed trial runs its unfinished Migrator step again (from the round's start: the
mark in the candidate is gone then), so the test marks the run's copy of the source before resuming it."""
KEEP_CTRL_C = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-m', 'harness.cli.app', *sys.argv[1:]])"
)
"""The bench as a terminal starts it: Ctrl-C not ignored, also where pytest was started in the background."""


def _slowed(replies: list[dict]) -> list[dict]:
    return [*replies[:3], plans.call("bash", command=GUARDED_SLEEP), *replies[3:]]  # after the writes, before submit


def _bench_args(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Four trials, two at a time: base s0 finishes; base s1 and twin s0 run the slow command; twin s1 waits.

    Returns:
        The command's arguments, and the trials' ids by scaffold and seed (`twin0`).
    """
    folder = tmp_path / "scripts"
    folder.mkdir()
    plans.write_script(folder / "tiny-calc-base-0.json", plans.base_two_rounds())
    plans.write_script(folder / "tiny-calc-base-1.json", _slowed(plans.base_two_rounds()))
    plans.write_script(folder / "tiny-calc-twin-0.json", _slowed(plans.twin_fix_in_round_two()))
    plans.write_script(folder / "tiny-calc-twin-1.json", plans.twin_fix_in_round_two())
    model = f"scripted:{folder}/{{task}}-{{scaffold}}-{{seed}}.json"
    args = ["bench", "--tasks", str(plans.TINY_TASK), "--model", model, "--scaffold", "base,twin", "--rounds", "1"]
    args += ["--seeds", "2", "--jobs", "2", "--name", "stop", "--benches-dir", str(tmp_path / "benches")]
    ids = {f"{scaffold}{seed}": TrialSpec(task=plans.TINY_TASK, model=model, scaffold=scaffold, seed=seed).trial_id
           for scaffold in ("base", "twin") for seed in (0, 1)}  # fmt: skip
    return [*args, "--no-report", "--skip-task-check", "--no-grade-snapshots"], ids


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _sleeping_under(pid: int) -> list[int]:
    found = []
    for child in descendants(pid):
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == b"sleep\x00297\x00":
                found.append(child)
        except OSError:
            continue
    return found


def _running(tags: dict[int, str | None]) -> list[int]:
    """Which of these processes still run (the same process by its tag; a zombie no init here reaps is not running)."""
    return [pid for pid, tag in tags.items() if tag and process_tag(pid) == tag and _state(pid) not in (None, "Z")]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def _named(pids: list[int], names: dict[int, str]) -> list[str]:
    """Each process as the test saw it started: pid, command line and state now."""
    return [f"{pid} [{_state(pid)}] {names.get(pid, '?')}" for pid in pids]


SENT = {  # how the bench is stopped: the first signal, then more while it stops
    "SIGTERM-to-its-pid": (False, [signal.SIGTERM], [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]),
    "SIGHUP-to-its-pid": (False, [signal.SIGHUP], [signal.SIGTERM]),
    "SIGTERM-to-its-group": (True, [signal.SIGTERM], [signal.SIGTERM, signal.SIGINT]),
    "Ctrl-C": (True, [signal.SIGINT], [signal.SIGINT, signal.SIGTERM]),
}


@pytest.mark.heavy  # a bench of four trials stopped mid-command, then resumed and graded
@pytest.mark.parametrize("how", list(SENT))
def test_a_stopped_bench_stops_its_trials_cleanly_and_resumes_them(tmp_path, stage, how):
    to_group, first, more = SENT[how]
    args, specs = _bench_args(tmp_path)
    bench = BenchDir(tmp_path / "benches" / "stop")
    out = tmp_path / "bench.out"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-c", KEEP_CTRL_C, *args],
            cwd=REPO,
            start_new_session=to_group,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
    send = (lambda number: os.killpg(proc.pid, number)) if to_group else (lambda number: os.kill(proc.pid, number))
    try:
        assert (os.getpgid(proc.pid) == proc.pid) is to_group  # by its pid alone: the bench leads no group
        deadline = time.time() + 300
        while time.time() < deadline:
            done = bench.load().trials if bench.results_path.is_file() else {}
            if specs["base0"] in done and len(_sleeping_under(proc.pid)) == 2:
                break
            time.sleep(0.3)
        assert done[specs["base0"]].status == "ok" and len(_sleeping_under(proc.pid)) == 2
        if unavailable(EXT4) is None:
            assert _mounts_under(tmp_path), "each running trial's candidate is on its capped filesystem"
        tags = {pid: process_tag(pid) for pid in descendants(proc.pid)}
        names = {pid: _cmdline(pid) for pid in tags}
        finished_log = (bench.runs / f"{specs['base0']}.log").stat().st_mtime
        for number in first:
            send(number)
        time.sleep(0.5)  # stopping
        for number in more:
            send(number)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        recover_capped()  # what a failed stop left (nothing, where the test passed) is released here
    reason = "interrupted" if first == [signal.SIGINT] else f"stopped by {first[0].name}"
    lines = err.decode().splitlines()
    assert proc.returncode == 130, err.decode()
    assert lines[-1] == (
        f"error: bench stop {reason}: 1 trial(s) done, 3 to run or resume; continue with the same twin bench "
        f"command ({bench.root})"
    )
    assert "Traceback" not in err.decode()
    assert _running(tags) == [], f"nothing the bench started runs on: {_named(_running(tags), names)}"
    if to_group:
        assert _left_in_session(proc.pid) == []
    assert _mounts_under(tmp_path) == [] and _loops_under(stage) == []
    results = bench.load()
    assert (results.status, results.stop_reason) == ("interrupted", reason)
    assert {key: results.trials[trial].status for key, trial in specs.items() if trial in results.trials} == {
        "base0": "ok",
        "base1": "stopped",
        "twin0": "stopped",
    }
    kept = {}
    for key in ("base1", "twin0"):
        run = RunDir(bench.runs / specs[key])
        state = run.load_state()
        assert state.status == "stopped" and state.stop_reason in ("interrupted", "stopped by SIGTERM")
        assert (run.candidate / "calc" / "ops.py").exists() and (run.candidate / ".slept").exists()
        kept[key] = run.trajectory.read_bytes()
        assert (run.root / "source").is_dir()
        (run.root / "source" / ".resumed").touch()

    assert main(args) == 0  # the same command: resumed
    results = bench.load()
    assert results.status == "finished"
    assert {key: results.trials[trial].status for key, trial in specs.items()} == dict.fromkeys(specs, "ok")
    assert all(results.trials[trial].attempts == 1 for trial in specs.values())
    assert (bench.runs / f"{specs['base0']}.log").stat().st_mtime == finished_log  # the finished trial: kept
    for key, before in kept.items():
        run = RunDir(bench.runs / specs[key])
        after = run.trajectory.read_bytes()
        assert after.startswith(before) and len(after) > len(before)  # continued where it stopped
        assert run.load_state().status == "finished"
    assert _mounts_under(tmp_path) == []
