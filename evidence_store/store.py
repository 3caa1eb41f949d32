"""`EvidenceStore`: one SQLite file per run, append-only evidence, and the views the loop reads.

Several processes may append to one store at once (the loop and parallel probe
processes): every write is one `BEGIN IMMEDIATE` transaction, writers queue on
SQLite's lock (`busy_timeout`), and readers (WAL) see only committed
transactions. A process killed mid-write loses at most the transaction it was
writing. An `EvidenceStore` object belongs to the process that opened it; in a
forked child it reopens the file on first use.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from evidence_store import exchange, views
from evidence_store.records import (
    SCHEMA_VERSION,
    DiagnosisRecord,
    EvidenceRecord,
    Outcome,
    RoundInfo,
)
from evidence_store.schema import EvidenceStoreError, connect, migrate

STORE_FILENAME = "evidence.sqlite"
"""The store's file name inside a run directory."""

RUNS_DIR = Path("runs")
"""Where a bare run id is looked up (relative to the working directory)."""

_RECORD_COLUMNS = (
    "e.record_id, e.schema_version, e.run_id, e.round, p.property_id, p.kind, p.level, "
    "p.description, e.outcome, e.score, e.context, e.observations, e.trace, e.time"
)
_SELECT_RECORDS = f"SELECT {_RECORD_COLUMNS} FROM evidence e JOIN properties p USING (prop_key)"
# The prompt rendering reads neither contexts (they may hold whole probe sources) nor
# established records (they render as ids): leaving them out keeps it fast.
_SELECT_PROBLEMS = (
    _SELECT_RECORDS.replace("e.context", "'{}'") + " WHERE e.outcome != 'established' AND"
)
_NO_ROUND_LIMIT = 2**62

_LATEST_IDS = (
    "SELECT (SELECT x.record_id FROM evidence x WHERE x.property_id = ids.property_id "
    "AND x.round <= ? ORDER BY x.round DESC, x.record_id DESC LIMIT 1) "
    "FROM (SELECT DISTINCT property_id FROM properties) ids"
)
"""The id of each property's latest record up to a round (one index seek per property)."""

PropKey = tuple[str, str, int, str]
"""A property as stored: (id, kind, level, description)."""


class EvidenceStore:
    """The evidence of one run: typed records, appended and never edited.

    Args:
        path: the SQLite file (conventionally `<run dir>/evidence.sqlite`).
        create: create the file if it does not exist; with False a missing file is an error.

    Raises:
        EvidenceStoreError: the file is missing (create=False), is not an evidence store,
            or was written by a newer twin. An older store is migrated in place.
    """

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise EvidenceStoreError(f"no evidence store at {self.path}")
            if not self.path.parent.is_dir():
                raise EvidenceStoreError(
                    f"cannot create {self.path}: {self.path.parent} is not a directory"
                )
        elif not self.path.is_file():
            raise EvidenceStoreError(f"{self.path} is not a file")
        self._pid = os.getpid()
        self._inherited: list[sqlite3.Connection] = []
        self._prop_keys: dict[PropKey, int] = {}
        self._db: sqlite3.Connection | None = connect(self.path)
        try:
            self.migrated_from = migrate(self._db, self.path)
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open_run(cls, run: str | Path, *, create: bool = True) -> EvidenceStore:
        """Open the store of a run: `run` is a run directory, or a run id under `./runs/`.

        Raises:
            EvidenceStoreError: no such run directory, or (create=False) it has no store.
        """
        candidates = [Path(run)]
        if not Path(run).is_absolute():
            candidates.append(RUNS_DIR / run)
        for directory in candidates:
            if directory.is_dir():
                return cls(directory / STORE_FILENAME, create=create)
        looked = " or ".join(str(c) for c in candidates)
        raise EvidenceStoreError(f"no run directory {run!r} (looked for {looked})")

    # ---- connection ---------------------------------------------------------------------------
    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise EvidenceStoreError(f"evidence store {self.path} is closed")
        if self._pid != os.getpid():
            # A SQLite connection must not cross a fork: the child opens its own and keeps the
            # inherited one referenced, because closing it here could release the parent's locks.
            self._inherited.append(self._db)
            self._pid, self._db = os.getpid(), connect(self.path)
        return self._db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees the same committed state."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close the file; further use raises `EvidenceStoreError`."""
        if self._db is not None and self._pid == os.getpid():
            self._db.close()
        self._db = None

    def __enter__(self) -> EvidenceStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- writing ------------------------------------------------------------------------------
    def append(self, record: EvidenceRecord) -> int:
        """Append one record; return its record id."""
        return self.append_many([record])[0]

    def append_many(self, records: Iterable[EvidenceRecord]) -> list[int]:
        """Append records in one transaction (all or none); return their record ids in order.

        Raises:
            EvidenceStoreError: a record is not an `EvidenceRecord`, has a negative round,
                a newer schema version, or context/observations that are not JSON.
        """
        rows = [_to_row(r) for r in records]
        with self._write() as conn:
            ids, new_keys = _insert_records(conn, rows, self._prop_keys)
        self._prop_keys.update(new_keys)  # only once committed: a rolled-back key never existed
        return ids

    def record_run(self, run_id: str, config: Mapping[str, Any] | None = None) -> None:
        """Note a run and its configuration (kept on first call; later calls change nothing)."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO runs (run_id, created, config) "
                "VALUES (?, strftime('%s','now'), ?)",
                (run_id, _dumps(dict(config or {}), "run config")),
            )

    def record_round(
        self, run_id: str, round: int, *, candidate_commit: str | None = None, note: str = ""
    ) -> None:
        """Note a round, the candidate commit its evidence was taken on, and an optional note."""
        _check_round(round)
        with self._write() as conn:
            _ensure_round(conn, run_id, round, None)
            conn.execute(
                "UPDATE rounds SET candidate_commit = coalesce(?, candidate_commit), "
                "note = CASE WHEN ? = '' THEN note ELSE ? END WHERE run_id = ? AND round = ?",
                (candidate_commit, note, note, run_id, round),
            )

    def record_diagnosis(
        self, run_id: str, round: int, diagnosis: Mapping[str, Any] | BaseModel
    ) -> int:
        """Append the diagnosis that opened `round`; return its id.

        Args:
            diagnosis: the structured diagnosis, as a mapping or a pydantic model.
        """
        _check_round(round)
        if isinstance(diagnosis, BaseModel):
            diagnosis = diagnosis.model_dump(mode="json")
        if not isinstance(diagnosis, Mapping):
            raise EvidenceStoreError(
                f"a diagnosis must be a mapping, not {type(diagnosis).__name__}"
            )
        record = DiagnosisRecord(run_id=run_id, round=round, diagnosis=dict(diagnosis))
        return self._insert_diagnoses([record])[0]

    def _insert_diagnoses(self, records: list[DiagnosisRecord]) -> list[int]:
        with self._write() as conn:
            return _insert_diagnoses(conn, records)

    # ---- reading ------------------------------------------------------------------------------
    def records(
        self, *, round: int | None = None, kind: str | None = None, property_id: str | None = None
    ) -> list[EvidenceRecord]:
        """Records in the order they were appended, optionally of one round, kind or property."""
        where, params = [], []
        for column, value in (("e.round", round), ("p.kind", kind), ("e.property_id", property_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._conn.execute(f"{_SELECT_RECORDS}{clause} ORDER BY e.record_id", params)
        return [_from_row(row) for row in rows]

    def get(self, record_id: int) -> EvidenceRecord:
        """One record by id.

        Raises:
            EvidenceStoreError: no record has that id.
        """
        row = self._conn.execute(
            f"{_SELECT_RECORDS} WHERE e.record_id = ?", (record_id,)
        ).fetchone()
        if row is None:
            raise EvidenceStoreError(f"{self.path} has no evidence record {record_id}")
        return _from_row(row)

    def count(self) -> int:
        """How many evidence records the store holds."""
        return int(self._conn.execute("SELECT count(*) FROM evidence").fetchone()[0])

    def evidence_rounds(self) -> list[int]:
        """The rounds that have at least one evidence record, ascending."""
        return [
            r[0] for r in self._conn.execute("SELECT DISTINCT round FROM evidence ORDER BY round")
        ]

    def rounds(self) -> list[RoundInfo]:
        """Every round the store has heard of (through evidence, diagnoses or `record_round`)."""
        rows = self._conn.execute(
            "SELECT run_id, round, started, candidate_commit, note FROM rounds "
            "ORDER BY round, run_id"
        )
        return [
            RoundInfo(run_id=r[0], round=r[1], started=r[2], candidate_commit=r[3], note=r[4])
            for r in rows
        ]

    def diagnoses(self, round: int | None = None) -> list[DiagnosisRecord]:
        """Diagnoses in the order they were recorded, optionally of one round."""
        sql = "SELECT diagnosis_id, schema_version, run_id, round, diagnosis, time FROM diagnoses"
        params: tuple[int, ...] = ()
        if round is not None:
            sql, params = sql + " WHERE round = ?", (round,)
        return [
            DiagnosisRecord(
                diagnosis_id=r[0],
                schema_version=r[1],
                run_id=r[2],
                round=r[3],
                diagnosis=json.loads(r[4]),
                time=r[5],
            )
            for r in self._conn.execute(sql + " ORDER BY diagnosis_id", params)
        ]

    def latest(self, *, up_to_round: int | None = None) -> dict[str, EvidenceRecord]:
        """The latest record of every property, by property id (latest round, then latest appended).

        Args:
            up_to_round: ignore records of later rounds (the state as it stood after that round).
        """
        return self._latest(_SELECT_RECORDS + " WHERE", up_to_round)

    def _latest(self, select: str, up_to_round: int | None) -> dict[str, EvidenceRecord]:
        limit = _NO_ROUND_LIMIT if up_to_round is None else up_to_round
        rows = self._conn.execute(
            f"{select} e.record_id IN ({_LATEST_IDS}) ORDER BY e.property_id", (limit,)
        )
        return {row[4]: _from_row(row) for row in rows}

    # ---- views --------------------------------------------------------------------------------
    def transitions(self, a: int, b: int) -> views.Transitions:
        """How each property's latest outcome moved from the state after round `a` to after `b`."""
        with self._snapshot():
            before, after = self.latest(up_to_round=a), self.latest(up_to_round=b)
        return views.transitions(before, after, a, b)

    def summary(self, *, up_to_round: int | None = None) -> views.Summary:
        """Counts of latest outcomes per outcome, kind and level."""
        limit = _NO_ROUND_LIMIT if up_to_round is None else up_to_round
        counts = self._conn.execute(
            "SELECT p.kind, p.level, e.outcome, count(*) FROM evidence e JOIN properties p "
            f"USING (prop_key) WHERE e.record_id IN ({_LATEST_IDS}) GROUP BY 1, 2, 3",
            (limit,),
        )
        return views.summarize_counts(counts, up_to_round)

    def render_for_prompt(
        self,
        max_chars: int = 4000,
        *,
        up_to_round: int | None = None,
        previous_round: int | None = None,
    ) -> str:
        """A compact text account of the evidence that never exceeds `max_chars`.

        Regressions (since `previous_round`) come first, then violated, then not
        established, then established (ids only); whatever does not fit is counted.

        Args:
            previous_round: the state regressions are measured against; by default the
                latest round with evidence before `up_to_round` (none: no regressions).
        """
        with self._snapshot() as conn:
            if up_to_round is None:
                up_to_round = conn.execute("SELECT max(round) FROM evidence").fetchone()[0]
            if previous_round is None and up_to_round is not None:
                previous_round = conn.execute(
                    "SELECT max(round) FROM evidence WHERE round < ?", (up_to_round,)
                ).fetchone()[0]
            limit = _NO_ROUND_LIMIT if up_to_round is None else up_to_round
            problems = self._latest(_SELECT_PROBLEMS, up_to_round)
            established = [
                pid
                for (pid,) in conn.execute(
                    "SELECT property_id FROM evidence WHERE outcome = 'established' AND "
                    f"record_id IN ({_LATEST_IDS}) ORDER BY property_id",
                    (limit,),
                )
            ]
            previous = None if previous_round is None else self._outcomes(previous_round)
        return views.render_parts(
            problems,
            established,
            previous,
            max_chars=max_chars,
            round=up_to_round,
            previous_round=previous_round,
        )

    def _outcomes(self, up_to_round: int) -> dict[str, views.Seen]:
        """Each property's latest outcome and its round, without building records."""
        rows = self._conn.execute(
            "SELECT e.property_id, e.outcome, e.round FROM evidence e WHERE e.record_id IN "
            f"({_LATEST_IDS})",
            (up_to_round,),
        )
        return {pid: views.Seen(Outcome(outcome), round) for pid, outcome, round in rows}

    # ---- exchange -----------------------------------------------------------------------------
    def export_jsonl(self, out: IO[str]) -> int:
        """Write every round, diagnosis and record as JSON Lines; return records + diagnoses."""
        with self._snapshot():
            return exchange.write_jsonl(
                out,
                rounds=self.rounds(),
                diagnoses=self.diagnoses(),
                records=(
                    _from_row(r)
                    for r in self._conn.execute(f"{_SELECT_RECORDS} ORDER BY e.record_id")
                ),
            )

    def import_jsonl(self, src: IO[str]) -> int:
        """Append what `export_jsonl` wrote, in one transaction; return records + diagnoses added.

        Records and diagnoses get new ids here. Nothing is added if any line is bad.

        Raises:
            EvidenceStoreError: a line is not JSON, of an unknown type, or of a newer version.
        """
        parsed = exchange.read_jsonl(src)
        rows = [_to_row(r) for r in parsed.records]
        with self._write() as conn:
            for info in parsed.rounds:
                _ensure_round(conn, info.run_id, info.round, info.started)
                conn.execute(
                    "UPDATE rounds SET candidate_commit = coalesce(candidate_commit, ?), "
                    "note = CASE WHEN note = '' THEN ? ELSE note END "
                    "WHERE run_id = ? AND round = ?",
                    (info.candidate_commit, info.note, info.run_id, info.round),
                )
            _insert_diagnoses(conn, parsed.diagnoses)
            _insert_records(conn, rows, {})
        return len(parsed.records) + len(parsed.diagnoses)


# ---- rows <-> records -------------------------------------------------------------------------
def _check_round(round: int) -> None:
    if not isinstance(round, int) or isinstance(round, bool) or round < 0:
        raise EvidenceStoreError(f"round must be a non-negative integer, not {round!r}")


def _to_row(record: EvidenceRecord) -> dict[str, Any]:
    if not isinstance(record, EvidenceRecord):
        raise EvidenceStoreError(f"can only append EvidenceRecord, not {type(record).__name__}")
    _check_round(record.round)
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
        "context": _dumps(record.context, f"context of the {what}"),
        "observations": _dumps(record.observations, f"observations of the {what}"),
        "trace": record.trace,
        "time": record.time,
    }


def _from_row(row: tuple[Any, ...]) -> EvidenceRecord:
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
            "context": _loads(row[10]),
            "observations": _loads(row[11]),
            "trace": row[12],
            "time": row[13],
        }
    )


def _insert_records(
    conn: sqlite3.Connection, rows: list[dict[str, Any]], known: Mapping[PropKey, int]
) -> tuple[list[int], dict[PropKey, int]]:
    """Insert rows; return their ids and the property keys looked up on the way."""
    ids: list[int] = []
    prop_keys: dict[PropKey, int] = dict(known)
    seen_rounds: set[tuple[str, int]] = set()
    for row in rows:
        run_round = (row["run_id"], row["round"])
        if run_round not in seen_rounds:
            _ensure_round(conn, *run_round, row["time"])
            seen_rounds.add(run_round)
        prop = row["prop"]
        if prop not in prop_keys:
            prop_keys[prop] = _prop_key(conn, prop)
        cursor = conn.execute(
            "INSERT INTO evidence (schema_version, run_id, round, prop_key, property_id, outcome, "
            "score, context, observations, trace, time) VALUES (:schema_version, :run_id, :round, "
            ":prop_key, :property_id, :outcome, :score, :context, :observations, :trace, :time) "
            "RETURNING record_id",
            {**row, "prop_key": prop_keys[prop], "property_id": prop[0]},
        )
        ids.append(cursor.fetchone()[0])
    return ids, prop_keys


def _insert_diagnoses(conn: sqlite3.Connection, records: list[DiagnosisRecord]) -> list[int]:
    ids = []
    for record in records:
        _ensure_round(conn, record.run_id, record.round, record.time)
        cursor = conn.execute(
            "INSERT INTO diagnoses (schema_version, run_id, round, diagnosis, time) "
            "VALUES (?, ?, ?, ?, ?) RETURNING diagnosis_id",
            (
                record.schema_version,
                record.run_id,
                record.round,
                _dumps(record.diagnosis, "diagnosis"),
                record.time,
            ),
        )
        ids.append(cursor.fetchone()[0])
    return ids


def _loads(text: str) -> Any:
    return {} if text == "{}" else json.loads(text)


def _prop_key(conn: sqlite3.Connection, prop: PropKey) -> int:
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


def _ensure_round(conn: sqlite3.Connection, run_id: str, round: int, when: float | None) -> None:
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


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, default=_json_default, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise EvidenceStoreError(f"{what} cannot be stored as JSON: {exc}") from None
