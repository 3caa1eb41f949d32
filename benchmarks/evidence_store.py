"""Throughput and latency of the evidence store.

Prints appends per second (in batches and one by one), the latest-outcome-per-property
view over 100,000 records, and the prompt rendering over 1,000 properties, each in
wall and process CPU time, against its target. Targets are judged on CPU time so that
a shared, busy machine does not count against the store. Exit status 1 when a
target is missed.

    python benchmarks/evidence_store.py [--records 100000] [--properties 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evidence_store.records import EvidenceRecord, Outcome, Property  # noqa: E402
from evidence_store.store import EvidenceStore  # noqa: E402

OUTCOMES = (Outcome.ESTABLISHED, Outcome.VIOLATED, Outcome.NOT_ESTABLISHED)


def make_records(properties: int, round: int, salt: int = 0) -> list[EvidenceRecord]:
    """One round of evidence: a record per property, with a realistic context and observations."""
    return [
        EvidenceRecord(
            run_id="bench",
            round=round,
            property=Property(
                id=f"forward.module_{p:04}.out",
                kind=("differential", "jit", "imports")[p % 3],
                level=p % 4,
                description="outputs match the reference within its noise floor",
            ),
            outcome=OUTCOMES[(p * 7 + round + salt) % 3],
            score=((p * 31 + round) % 1000) / 1000,
            context={
                "probe": "def probe(m, x):\n    return m(x)\n",
                "seed": round,
                "inputs": {"x": [2, 16, 64]},
                "candidate_commit": f"{round:040x}",
                "versions": {"jax": "0.10.2", "torch": "2.13.0"},
            },
            observations={"per_output": {"out": 0.99}, "noise_floor": 1e-6},
            trace="" if (p + round) % 3 != 2 else "Traceback ...\nValueError: shapes differ",
        )
        for p in range(properties)
    ]


class Timing(NamedTuple):
    """Median wall and CPU seconds of one operation."""

    wall: float
    cpu: float


def timed(fn: Callable[[], object], repeats: int = 5) -> Timing:
    """Median wall and process CPU time of `fn` (after one warm-up call)."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def once(fn: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--properties", type=int, default=1_000)
    args = parser.parse_args()
    rounds = max(2, args.records // args.properties)
    # (name, wall, cpu, target or None, unit); targets are judged on CPU time, so that other
    # processes competing for a shared machine's cores do not count against the store.
    rows: list[tuple[str, float, float, float | None, str]] = []

    with tempfile.TemporaryDirectory() as tmp:
        store = EvidenceStore(Path(tmp) / "evidence.sqlite")
        batches = [make_records(args.properties, r) for r in range(rounds)]
        t = once(lambda: [store.append_many(batch) for batch in batches])
        n = store.count()
        rows.append((f"appends/s, batches of {args.properties}", n / t.wall, n / t.cpu, 2000, ">"))
        singles = make_records(500, rounds, salt=1)
        t = once(lambda: [store.append(record) for record in singles])
        n = len(singles)
        rows.append(("appends/s, one per transaction", n / t.wall, n / t.cpu, None, ""))

        total = store.count()
        t = timed(store.latest)
        rows.append((f"latest() over {total} records, ms", t.wall * 1e3, t.cpu * 1e3, 100, "<"))
        t = timed(lambda: store.render_for_prompt(4000))
        name = f"render_for_prompt() over {args.properties} properties, ms"
        rows.append((name, t.wall * 1e3, t.cpu * 1e3, 15, "<"))
        t = timed(store.summary)
        rows.append(("summary(), ms", t.wall * 1e3, t.cpu * 1e3, None, ""))
        t = timed(lambda: store.transitions(rounds - 2, rounds - 1))
        rows.append(("transitions() between two rounds, ms", t.wall * 1e3, t.cpu * 1e3, None, ""))
        size_mb = (Path(tmp) / "evidence.sqlite").stat().st_size / 2**20
        store.close()

    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  {'wall':>9}  {'cpu':>9}  target (on cpu)")
    missed = 0
    for name, wall, cpu, target, sense in rows:
        verdict = ""
        if target is not None:
            ok = cpu > target if sense == ">" else cpu < target
            missed += not ok
            verdict = f"{sense} {target}  {'ok' if ok else 'MISSED'}"
        print(f"{name:<{width}}  {wall:>9.1f}  {cpu:>9.1f}  {verdict}")
    print(f"{'store size, MiB':<{width}}  {size_mb:>9.1f}")
    print(f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
