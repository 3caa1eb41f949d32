"""A bench on Ray stops its trials as the local pool does: cancelled, each `twin migrate` is sent SIGTERM once."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from ground.errors import Interrupted
from harness.bench import executors, trials
from harness.bench.trials import KILLED_AT_STOP, timed_trial_process
from tests.harness.test_executors import Unbounded
from tests.harness.test_trial_processes import COUNTING

IGNORING = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


def _interrupted(command: list[str], log, ready) -> tuple[BaseException | None, float]:
    """Run `timed_trial_process` in a thread, interrupt it as `ray.cancel` does once `ready()`; what it raised."""
    raised: list[BaseException] = []

    def worker() -> None:
        try:
            timed_trial_process(command, log, dict(os.environ))
        except BaseException as exc:  # noqa: BLE001 - what the interruption became is the result
            raised.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    deadline = time.monotonic() + 60
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    interrupted = time.monotonic()
    # Ray's cancel raises KeyboardInterrupt in the worker's thread from another thread: taken between Python steps
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))
    thread.join(timeout=60)
    assert not thread.is_alive(), "the interruption was never taken"
    return (raised[0] if raised else None), time.monotonic() - interrupted


def test_a_cancelled_trial_is_sent_sigterm_once_and_waited_for(tmp_path):
    mark = tmp_path / "trial.txt"
    raised, _ = _interrupted([sys.executable, "-c", COUNTING, str(mark)], tmp_path / "trial.log",
                             lambda: mark.exists() and mark.read_text() == "ready")  # fmt: skip
    assert isinstance(raised, KeyboardInterrupt)
    assert mark.read_text() == "1"  # one SIGTERM, and the trial ended (its last write done) before the raise


def test_a_cancelled_trial_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(trials, "STOP_GRACE_S", 1.0)
    log = tmp_path / "trial.log"
    raised, took = _interrupted([sys.executable, "-c", IGNORING], log,
                                lambda: log.exists() and "ready" in log.read_text())  # fmt: skip
    assert isinstance(raised, KeyboardInterrupt) and 1.0 <= took < 30
    assert log.read_text().endswith("twin bench: the trial did not stop within 1 s of SIGTERM: killed\n")


class _RayError(Exception):
    """Ray's RayError, in the stand-in below."""


class _Cancelled(_RayError):
    """Ray's TaskCancelledError, in the stand-in below."""


def _fake_ray(ended: dict[str, tuple[int, float]], stop_on: str) -> SimpleNamespace:
    """A Ray whose `get` of `stop_on` is where the bench is stopped; after a cancel, `ended` trials return."""
    cancelled: list[str] = []

    def get(ref: str):
        if not cancelled and ref == stop_on:
            raise KeyboardInterrupt
        if ref in ended:
            return ended[ref]
        assert ref in cancelled
        raise _Cancelled(ref)

    remote = lambda **_: lambda function: SimpleNamespace(remote=lambda command, log, env: command[0])  # noqa: E731
    return SimpleNamespace(is_initialized=lambda: True, remote=remote, get=get, cancel=cancelled.append,
                           wait=lambda refs, timeout: (refs, []),
                           cancelled=cancelled, exceptions=SimpleNamespace(RayError=_RayError))  # fmt: skip


def test_a_stopped_ray_bench_cancels_every_unrecorded_trial_and_records_each_as_it_ended(tmp_path, monkeypatch):
    ray = _fake_ray({"quick": (0, 1.5)}, stop_on="slow")
    monkeypatch.setitem(sys.modules, "ray", ray)
    recorded = []

    def record(spec, code, started, inner_s):
        recorded.append((spec, code))
        return SimpleNamespace(status="ok", attempts=1)

    config = SimpleNamespace(jobs=2, infra_retries=0, retry_backoff_s=0, ray_address=None)
    with pytest.raises(KeyboardInterrupt):
        executors.run_with_ray(config, ["slow", "quick"], lambda s: ([s], tmp_path / s), record, {}, Unbounded())
    assert ray.cancelled == ["slow", "quick"]
    assert recorded == [("slow", Interrupted.exit_code), ("quick", 0)]  # stopped; ended before its cancel
    assert Interrupted.exit_code in trials.STOPPED_EXITS and KILLED_AT_STOP in trials.STOPPED_EXITS


@pytest.mark.slow  # a local Ray cluster and a bench of four trials: minutes on two cores
def test_a_stopped_bench_on_ray_stops_its_trials_cleanly_and_resumes_them(tmp_path, stage):
    pytest.importorskip("ray")
    import signal
    import subprocess

    from ground.sandboxes.owner import descendants, process_tag
    from ground.sandboxes.quota import recover_capped
    from harness.bench.directory import BenchDir
    from harness.cli.app import main
    from harness.run.directory import RunDir
    from tests.harness.test_trial_processes import KEEP_CTRL_C, REPO, _bench_args, _running, _sleeping_under

    args, specs = _bench_args(tmp_path)
    ray_args = [*args, "--executor", "ray"]
    bench = BenchDir(tmp_path / "benches" / "stop")
    proc = subprocess.Popen([sys.executable, "-c", KEEP_CTRL_C, *ray_args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "RAY_AUTH_MODE": "disabled"})  # fmt: skip
    try:
        deadline = time.time() + 400
        while time.time() < deadline and len(_sleeping_under(proc.pid)) < 2:
            time.sleep(0.5)
        assert len(_sleeping_under(proc.pid)) == 2, "two trials run their slow command on Ray's workers"
        trials_now = {pid: process_tag(pid) for pid in descendants(proc.pid)}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        recover_capped()
    assert proc.returncode == 130, err.decode()
    assert "Traceback" not in err.decode()
    assert _running(trials_now) == [], "nothing the bench started on Ray runs on"
    results = bench.load()
    assert (results.status, results.stop_reason) == ("interrupted", "stopped by SIGTERM")
    statuses = {key: results.trials[trial].status for key, trial in specs.items() if trial in results.trials}
    stopped = [key for key, status in statuses.items() if status == "stopped"]
    assert len(stopped) >= 2, statuses
    for key in stopped:
        run = RunDir(bench.runs / specs[key])
        if (run.candidate / ".slept").exists():  # it was in its slow command: stopped there, as at Ctrl-C
            assert run.load_state().status == "stopped"
        if (run.root / "source").is_dir():
            (run.root / "source" / ".resumed").touch()
    assert main(args) == 0  # resumed, by the local pool
    assert {key: bench.load().trials[trial].status for key, trial in specs.items()} == dict.fromkeys(specs, "ok")
