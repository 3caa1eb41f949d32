"""A bench's directory and the reading and writing of its results.

A bench lives in `benches/<name>/`: `bench.json` (its configuration), `results.json`
(typed, versioned, rewritten atomically after every trial), `ledger.json` (dollars
and tokens spent by all trials together), `runs/<trial-id>/` (each trial's run
directory) and `runs/<trial-id>.log`.
"""

from __future__ import annotations

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
