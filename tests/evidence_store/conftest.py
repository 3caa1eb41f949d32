"""Fixtures of the evidence store tests: a fresh store and a compact record builder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.store import EvidenceStore

MakeRecord = Callable[..., EvidenceRecord]


def record(
    pid: str,
    outcome: str,
    round: int,
    *,
    kind: str = "differential",
    level: int = 1,
    run_id: str = "run-1",
    **fields: object,
) -> EvidenceRecord:
    """A record of property `pid` with `outcome` in `round`."""
    return EvidenceRecord(
        run_id=run_id,
        round=round,
        property=Property(id=pid, kind=kind, level=level),
        outcome=Outcome(outcome),
        **fields,
    )


@pytest.fixture
def make_record() -> MakeRecord:
    return record


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EvidenceStore]:
    with EvidenceStore(tmp_path / "evidence.sqlite") as opened:
        yield opened
