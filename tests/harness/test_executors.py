"""The local pool of trial processes, stopped: its running trials stopped and recorded, no further one started."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import pytest

from harness.bench.executors import run_locally


class Unbounded:
    def check(self) -> None:
        """The bench's ledger with budget left."""


def test_a_stopped_pool_stops_its_running_trials_records_each_and_starts_no_more(tmp_path):
    commands = {"slow": [sys.executable, "-c", "import time; time.sleep(60)"], "quick": ["true"], "queued": ["true"]}
    queue = ["slow", "quick", "queued"]
    recorded = []

    def record(spec, code, started, inner_s):
        recorded.append((spec, code))
        if spec == "quick":
            raise KeyboardInterrupt  # the stop arrives as the bench records a finished trial
        return SimpleNamespace(status="stopped", attempts=0)

    config = SimpleNamespace(jobs=2, infra_retries=0, retry_backoff_s=0)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_locally(
            config, queue, lambda spec: (commands[spec], tmp_path / spec), record, dict(os.environ), Unbounded()
        )
    assert recorded == [("quick", 0), ("slow", -15)]  # the running trial: sent SIGTERM, then recorded
    assert time.monotonic() - began < 30
    assert queue == ["queued"] and not (tmp_path / "queued.log").exists()
