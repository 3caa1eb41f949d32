"""How records map to SQLite rows: the SQL the store runs, conversions, and the inserts.

Kept apart from `EvidenceStore` so that the class reads as its API. Every insert
here runs inside a write transaction the caller holds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel

from evidence_store.reading import Seen
from evidence_store.records import SCHEMA_VERSION, DiagnosisRecord, EvidenceRecord, Outcome, RoundInfo
from evidence_store.schema import EvidenceStoreError
from evidence_store.views import NON_CANDIDATE_KINDS

_RECORD_COLUMNS = (
    "e.record_id, e.schema_version, e.run_id, e.round, p.property_id, p.kind, p.level, "
    "p.description, e.outcome, e.score, e.context, e.observations, e.trace, e.time, e.reference_run"
)
SELECT_RECORDS = f"SELECT {_RECORD_COLUMNS} FROM evidence e JOIN properties p USING (prop_key)"
"""Every column of a record; `from_row` turns a result row into an `EvidenceRecord`."""

SELECT_BLOCKS = SELECT_RECORDS.replace("e.context", "'{}'")
"""Records without their contexts (which may hold whole probe sources): what the prompt rendering needs."""

SELECT_PROBLEMS = SELECT_BLOCKS + " WHERE e.outcome != 'established'"
"""Records that are not established, without their contexts."""

REIMPLEMENTED = "(e.reference_run IS NOT NULL AND json_array_length(e.reference_run, '$.not_ran') > 0)"
"""SQL: the record's reference never ran a component the probe names (`ProbeResult.reimplemented`)."""

LATEST_IDS = (
    "SELECT (SELECT x.record_id FROM evidence x WHERE x.property_id = ids.property_id "
    "AND x.round <= :limit ORDER BY x.round DESC, x.record_id DESC LIMIT 1) "
    "FROM (SELECT DISTINCT property_id FROM properties) ids"
)
"""The id of each property's latest record up to round `:limit` (one index seek per property)."""

OUTCOMES = {outcome.value: outcome for outcome in Outcome}
"""Each outcome by its stored text (a lookup, cheaper than calling `Outcome` per row)."""

NO_ROUND_LIMIT = 2**62
"""A `:limit` above every round."""

PropKey = tuple[str, str, int, str]
"""A property as stored: (id, kind, level, description)."""


def check_round(round: int) -> None:
    """Refuse a round that is not a non-negative integer."""
    if not isinstance(round, int) or isinstance(round, bool) or round < 0:
        raise EvidenceStoreError(f"round must be a non-negative integer, not {round!r}")


def to_row(record: EvidenceRecord) -> dict[str, Any]:
    """Check a record and turn it into insert parameters (JSON made here, before any write)."""
    if not isinstance(record, EvidenceRecord):
        raise EvidenceStoreError(f"can only append EvidenceRecord, not {type(record).__name__}")
    check_round(record.round)
    if record.schema_version > SCHEMA_VERSION:
        raise EvidenceStoreError(
            f"record schema version {record.schema_version} is newer than {SCHEMA_VERSION}"
        )
    prop = record.property
    what = f"record of {prop.id!r}"
    return {
        "prop": (prop.id, prop.kind, prop.level, prop.description),
        "schema_version": record.schema_version,
        "run_id": record.run_id,
        "round": record.round,
        "outcome": Outcome(record.outcome).value,
        "score": record.score,
        "context": dumps(record.context, f"context of the {what}"),
        "observations": dumps(record.observations, f"observations of the {what}"),
        "trace": record.trace,
        "time": record.time,
        "reference_run": None
        if record.reference_run is None
        else dumps(record.reference_run.model_dump(mode="json"), f"reference run of the {what}"),
    }


def from_row(row: tuple[Any, ...]) -> EvidenceRecord:
    """A result row of `SELECT_RECORDS` (or `SELECT_PROBLEMS`) as a record."""
    # pydantic-core validates a plain dict faster than `model_construct` builds the models.
    return EvidenceRecord.model_validate(
        {
            "record_id": row[0],
            "schema_version": row[1],
            "run_id": row[2],
            "round": row[3],
            "property": {"id": row[4], "kind": row[5], "level": row[6], "description": row[7]},
            "outcome": row[8],
            "score": row[9],
            "context": loads(row[10]),
            "observations": loads(row[11]),
            "trace": row[12],
            "time": row[13],
            "reference_run": None if row[14] is None else json.loads(row[14]),
        }
    )


def insert_records(
    conn: sqlite3.Connection, rows: list[dict[str, Any]], known: Mapping[PropKey, int]
) -> tuple[list[int], dict[PropKey, int]]:
    """Insert rows; return their ids and the property keys looked up on the way."""
    ids: list[int] = []
    prop_keys: dict[PropKey, int] = dict(known)
    seen_rounds: set[tuple[str, int]] = set()
    for row in rows:
        run_round = (row["run_id"], row["round"])
        if run_round not in seen_rounds:
            ensure_round(conn, *run_round, row["time"])
            seen_rounds.add(run_round)
        prop = row["prop"]
        if prop not in prop_keys:
            prop_keys[prop] = prop_key(conn, prop)
        cursor = conn.execute(
            "INSERT INTO evidence (schema_version, run_id, round, prop_key, property_id, outcome, "
            "score, context, observations, trace, time, reference_run) VALUES (:schema_version, :run_id, "
            ":round, :prop_key, :property_id, :outcome, :score, :context, :observations, :trace, :time, "
            ":reference_run) RETURNING record_id",
            {**row, "prop_key": prop_keys[prop], "property_id": prop[0]},
        )
        ids.append(cursor.fetchone()[0])
    return ids, prop_keys


def insert_diagnoses(conn: sqlite3.Connection, records: list[DiagnosisRecord]) -> list[int]:
    """Insert diagnoses; return their ids."""
    ids = []
    for record in records:
        ensure_round(conn, record.run_id, record.round, record.time)
        cursor = conn.execute(
            "INSERT INTO diagnoses (schema_version, run_id, round, diagnosis, time) "
            "VALUES (?, ?, ?, ?, ?) RETURNING diagnosis_id",
            (
                record.schema_version,
                record.run_id,
                record.round,
                dumps(record.diagnosis, "diagnosis"),
                record.time,
            ),
        )
        ids.append(cursor.fetchone()[0])
    return ids


def loads(text: str) -> Any:
    """`json.loads`, short-cut for the empty object most observations and contexts are."""
    return {} if text == "{}" else json.loads(text)


def prop_key(conn: sqlite3.Connection, prop: PropKey) -> int:
    """The row key of a property, inserting it the first time it is seen."""
    conn.execute(
        "INSERT OR IGNORE INTO properties (property_id, kind, level, description) "
        "VALUES (?, ?, ?, ?)",
        prop,
    )
    row = conn.execute(
        "SELECT prop_key FROM properties WHERE property_id = ? AND kind = ? AND level = ? "
        "AND description = ?",
        prop,
    ).fetchone()
    return int(row[0])


def ensure_round(conn: sqlite3.Connection, run_id: str, round: int, when: float | None) -> None:
    """Make sure the run and round rows exist (first sight sets their start time)."""
    conn.execute(
        "INSERT OR IGNORE INTO runs (run_id, created) "
        "VALUES (?, coalesce(?, strftime('%s','now')))",
        (run_id, when),
    )
    conn.execute(
        "INSERT OR IGNORE INTO rounds (run_id, round, started) "
        "VALUES (?, ?, coalesce(?, strftime('%s','now')))",
        (run_id, round, when),
    )


class LatestState(NamedTuple):
    """The latest outcomes of the candidate properties, as the prompt rendering reads them."""

    problems: dict[str, Seen]
    """The properties that are not established: outcome and round, by id."""
    established: list[str]
    """The ids of the established ones, sorted."""
    reimplemented: list[str]
    """The ids of the established ones whose reference never ran a component the probe names."""
    record_ids: list[int]
    """The record ids of the problems and of the `reimplemented` ones (the records rendered whole)."""


def latest_state(conn: sqlite3.Connection, limit: dict[str, int]) -> LatestState:
    """The latest outcomes (up to `limit`) of the candidate properties, in one pass."""
    found = conn.execute(
        f"SELECT e.record_id, e.property_id, e.outcome, e.round, p.kind, {REIMPLEMENTED} FROM evidence e "
        f"JOIN properties p USING (prop_key) WHERE e.record_id IN ({LATEST_IDS}) ORDER BY e.property_id",
        limit,
    )
    state = LatestState({}, [], [], [])
    for record_id, pid, outcome, round, kind, reimplemented in found:
        if kind in NON_CANDIDATE_KINDS:
            continue
        if outcome == "established":
            state.established.append(pid)
            if reimplemented:
                state.reimplemented.append(pid)
                state.record_ids.append(record_id)
        else:
            state.problems[pid] = Seen(OUTCOMES[outcome], round)
            state.record_ids.append(record_id)
    return state


def merge_round(conn: sqlite3.Connection, info: RoundInfo) -> None:
    """Add an imported round; its commit and note fill in only what this store lacks."""
    ensure_round(conn, info.run_id, info.round, info.started)
    conn.execute(
        "UPDATE rounds SET candidate_commit = coalesce(candidate_commit, ?), "
        "note = CASE WHEN note = '' THEN ? ELSE note END "
        "WHERE run_id = ? AND round = ?",
        (info.candidate_commit, info.note, info.run_id, info.round),
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars, without importing numpy
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def dumps(value: Any, what: str) -> str:
    """Compact JSON of `value`; numpy values, paths and models are converted, others refused."""
    try:
        return json.dumps(value, default=_json_default, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise EvidenceStoreError(f"{what} cannot be stored as JSON: {exc}") from None
