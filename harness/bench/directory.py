"""A bench's directory and the reading and writing of its results.

A bench lives in `benches/<name>/`: `bench.json` (its configuration), `results.json`
(typed, versioned, rewritten atomically after every trial), `ledger.json` (dollars
and tokens spent by all trials together), `runs/<trial-id>/` (each trial's run
directory) and `runs/<trial-id>.log`. `bench.lock` is held by the `twin bench` running it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ground.untrusted_io import write_text_atomic
from harness.bench.schema import RESULTS_VERSION, BenchError, BenchResults


class BenchDir:
    """Paths and persistence of one bench."""

    def __init__(self, root: Path) -> None:
        self.root = root

    config_path = property(lambda self: self.root / "bench.json")
    results_path = property(lambda self: self.root / "results.json")
    ledger_path = property(lambda self: self.root / "ledger.json")
    runs = property(lambda self: self.root / "runs")

    @classmethod
    def open(cls, bench: str | Path, benches_dir: Path = Path("benches")) -> BenchDir:
        root = Path(bench)
        if not (root / "results.json").is_file():
            root = benches_dir / str(bench)
        if not (root / "results.json").is_file():
            raise BenchError(f"no bench at {bench}: expected a directory with results.json")
        return cls(root)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the bench for one `twin bench` (an exclusive `flock` on `bench.lock`, released at exit or death).

        A second command on the same bench (run again while the first still runs or stops) would
        resume the same trials' run directories beside it.

        Raises:
            BenchError: another process holds it (one line saying what to do).
        """
        fd = os.open(self.root / "bench.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise BenchError(
                    f"bench {self.root} is being run by another twin bench: wait for it to finish or stop it"
                ) from None
            yield
        finally:
            os.close(fd)

    def held_now(self) -> bool:
        """Whether a `twin bench` holds the bench at this moment (its `bench.lock` is locked)."""
        try:
            fd = os.open(self.root / "bench.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False  # never run since locks were kept, or not a plain file: no holder to see
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # let go at once, below
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        finally:
            os.close(fd)
        return False

    def load(self) -> BenchResults:
        try:
            results = BenchResults.model_validate_json(self.results_path.read_text())
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read {self.results_path}: {str(exc).splitlines()[0]}") from None
        if results.schema_version > RESULTS_VERSION:
            raise BenchError(f"{self.results_path} was written by a newer twin")
        return results

    def save(self, results: BenchResults) -> None:
        write_text_atomic(self.results_path, results.model_dump_json(indent=2))
