"""The trials a local bench is running, so that a stop reaches every one of them.

Each trial is a `twin migrate` process in the bench's process group. A Ctrl-C, or a
SIGTERM or SIGHUP sent to the whole group, reaches every trial; one sent to the bench's pid
alone (a scheduler's, `timeout`'s, a `kill PID`) reaches the bench only. Either way the bench
`stop`s: every trial still running is sent SIGTERM once, which stops it as Ctrl-C would (its
sandboxes killed, its mounts released, its run saved as stopped: `harness.cli.stop_signals`),
and no further trial starts. A trial the group's signal reached first ignores the bench's.
A trial still running `trials.STOP_GRACE_S` after that SIGTERM (one that ignores it, or hangs in its
clean-up) is killed, a line in its log says so, and it is recorded as stopped (a killed run
resumes; what it left mounted is recovered when it does): a stopped bench never waits forever.
A trial also stops if the bench is killed outright (`trials.start_trial_process`).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from harness.bench import trials
from harness.bench.trials import KILLED_AT_STOP, kill_late_trial, start_trial_process


class TrialProcesses:
    """The running trials' processes; once stopped, it starts none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a trial is started, or refused, wholly before or after a stop
        self._live: dict[subprocess.Popen, Path] = {}  # each running trial and its log
        self._killed: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, command: list[str], log: Path, env: dict[str, str]) -> tuple[int | None, float]:
        """Run one trial to its end (from a worker thread).

        Returns:
            Its exit code and the seconds spent in its process (model, sandbox, grader); a code of
            None where the bench stopped before the trial started, `KILLED_AT_STOP` where the
            stopped bench killed it.
        """
        with self._lock:
            if self._stopped:
                return None, 0.0
            started = time.monotonic()
            proc = start_trial_process(command, log, env)
            self._live[proc] = log
        try:
            code = proc.wait()
        finally:
            with self._lock:
                self._live.pop(proc, None)
                if proc in self._killed:
                    code = KILLED_AT_STOP
        return code, time.monotonic() - started

    def stop(self) -> int:
        """Send every running trial SIGTERM and start no more; return how many were sent it (a second stop: none).

        Those still running `trials.STOP_GRACE_S` later are killed (`_kill_late`, from a timer thread).
        """
        with self._lock:
            if self._stopped:
                return 0
            self._stopped = True
            live = list(self._live)
        for proc in live:
            proc.send_signal(signal.SIGTERM)  # nothing where it has just ended and been reaped
        if live:
            timer = threading.Timer(trials.STOP_GRACE_S, self._kill_late)
            timer.daemon = True
            timer.start()
        return len(live)

    def _kill_late(self) -> None:
        """Kill every trial still running after the grace, each with a line in its log saying why."""
        with self._lock:
            late = [(proc, log) for proc, log in self._live.items() if proc.poll() is None]
            self._killed.update(proc for proc, _ in late)
        for proc, log in late:
            kill_late_trial(proc, log, trials.STOP_GRACE_S)
