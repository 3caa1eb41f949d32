"""The disk a command may fill: the watch over its writable roots, the guard that stops it, its result."""

from __future__ import annotations

import signal
import threading

from ground.boundary import Limits
from ground.sandboxes.disk import DISK_RETURNCODE, DiskGuard, DiskWatch
from ground.sandboxes.process import HeadTail, command_result


def test_disk_watch_names_the_root_inside_and_counts_allocated_blocks(tmp_path):
    root = tmp_path / "app"
    root.mkdir()
    watch = DiskWatch([root], 1, ["/app"])
    with open(root / "sparse", "wb") as fh:
        fh.truncate(64 << 20)  # 64 MiB long, nothing allocated
    assert watch.over() is None
    (root / "dense").write_bytes(b"x" * (2 << 20))
    reason = watch.over()
    assert reason is not None and reason.startswith("disk: /app") and str(tmp_path) not in reason


def test_the_guard_stops_the_command_once_when_a_root_goes_over_and_says_why(tmp_path):
    root = tmp_path / "app"
    root.mkdir()
    stopped = threading.Event()
    calls: list[str] = []

    def stop() -> None:
        calls.append("stop")
        stopped.set()

    guard = DiskGuard(DiskWatch([root], 1, ["/app"]), stop)
    (root / "dense").write_bytes(b"x" * (2 << 20))
    assert stopped.wait(10)
    guard.finish()
    assert calls == ["stop"] and guard.exceeded().startswith("disk: /app holds ")


def test_a_root_found_over_only_when_the_command_ended_still_counts(tmp_path):
    root = tmp_path / "app"
    root.mkdir()
    watch = DiskWatch([root], 1, ["/app"])
    guard = DiskGuard(watch, lambda: None)
    guard.finish()  # the command ended before the guard looked
    assert guard.exceeded() is None
    (root / "dense").write_bytes(b"x" * (2 << 20))
    assert guard.exceeded().startswith("disk: /app")


def test_without_writable_roots_there_is_nothing_to_guard(tmp_path):
    for watch in (None, DiskWatch([], 1)):
        guard = DiskGuard(watch, lambda: (_ for _ in ()).throw(AssertionError("stopped")))
        guard.finish()
        assert guard.exceeded() is None


def _streams(out: bytes, err: bytes) -> tuple[HeadTail, HeadTail]:
    kept = HeadTail(1000), HeadTail(1000)
    kept[0].feed(out)
    kept[1].feed(err)
    return kept


def test_a_command_the_disk_stopped_fails_saying_why():
    out, err = _streams(b"partial", b"")
    result = command_result(0, out, err, timed_out=False, started=0.0, exceeded="disk: /app is full", limits=Limits())
    assert result.returncode == DISK_RETURNCODE and result.exceeded == "disk: /app is full" and not result.ok
    assert result.stdout == "partial" and result.stderr.endswith("twin: the command was stopped: disk: /app is full\n")


def test_a_death_by_sigxfsz_is_the_per_file_cap_and_other_results_pass_unchanged():
    limits = Limits(disk_mb=10, file_mb=3)
    out, err = _streams(b"", b"")
    capped = command_result(-signal.SIGXFSZ, out, err, timed_out=False, started=0.0, exceeded=None, limits=limits)
    assert capped.returncode == DISK_RETURNCODE and capped.exceeded.startswith("disk: a file reached the size cap of 3")
    out, err = _streams(b"ok", b"warn")
    plain = command_result(3, out, err, timed_out=True, started=0.0, exceeded=None, limits=limits)
    seen = (plain.returncode, plain.stdout, plain.stderr, plain.timed_out, plain.exceeded)
    assert seen == (3, "ok", "warn", True, None)
