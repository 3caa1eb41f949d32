"""The trials a local bench is running, so that a stop reaches every one of them.

Each trial is a `twin migrate` process in the bench's process group. A Ctrl-C, or a
SIGTERM or SIGHUP sent to the whole group, reaches every trial; one sent to the bench's pid
alone (a scheduler's, `timeout`'s, a `kill PID`) reaches the bench only. Either way the bench
`stop`s: every trial still running is sent SIGTERM once, which stops it as Ctrl-C would (its
sandboxes killed, its mounts released, its run saved as stopped: `harness.cli.stop_signals`),
and no further trial starts. A trial the group's signal reached first ignores the bench's.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from harness.bench.trials import start_trial_process


class TrialProcesses:
    """The running trials' processes; once stopped, it starts none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a trial is started, or refused, wholly before or after a stop
        self._live: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, command: list[str], log: Path, env: dict[str, str]) -> tuple[int | None, float]:
        """Run one trial to its end (from a worker thread).

        Returns:
            Its exit code and the seconds spent in its process (model, sandbox, grader); a code of
            None where the bench stopped before the trial started.
        """
        with self._lock:
            if self._stopped:
                return None, 0.0
            started = time.monotonic()
            proc = start_trial_process(command, log, env)
            self._live.add(proc)
        try:
            code = proc.wait()
        finally:
            with self._lock:
                self._live.discard(proc)
        return code, time.monotonic() - started

    def stop(self) -> int:
        """Send every running trial SIGTERM and start no more; return how many were sent it (a second stop: none)."""
        with self._lock:
            if self._stopped:
                return 0
            self._stopped = True
            live = list(self._live)
        for proc in live:
            proc.send_signal(signal.SIGTERM)  # nothing where it has just ended and been reaped
        return len(live)
