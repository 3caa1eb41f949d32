"""`EvidenceStore`: one SQLite file per run, append-only evidence, and the views the loop reads.

Several processes may append to one store at once (the loop and parallel probe
processes): every write is one `BEGIN IMMEDIATE` transaction, writers queue on
SQLite's lock (`busy_timeout`), and readers (WAL) see only committed
transactions. A process killed mid-write loses at most the transaction it was
writing. Each thread, and each forked child, gets its own SQLite connection.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from evidence_store import exchange, reading, rows, views
from evidence_store.records import DiagnosisRecord, EvidenceRecord, RoundInfo
from evidence_store.rows import LATEST_IDS, NO_ROUND_LIMIT, OUTCOMES, SELECT_BLOCKS, SELECT_RECORDS
from evidence_store.schema import EvidenceStoreError, connect, migrate

STORE_FILENAME = "evidence.sqlite"
"""The store's file name inside a run directory."""

RUNS_DIR = Path("runs")
"""Where a bare run id is looked up (relative to the working directory)."""


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
        self._lock = threading.Lock()
        self._closed = False
        self._prop_keys: dict[rows.PropKey, int] = {}
        # (pid, thread id) -> connection. Connections opened by a parent process stay referenced
        # and unclosed in a forked child: closing them there could release the parent's locks.
        self._conns: dict[tuple[int, int], sqlite3.Connection] = {}
        conn = self._conn
        try:
            self.migrated_from = migrate(conn, self.path)
        except BaseException:
            self.close()
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

    # ---- connections and transactions ---------------------------------------------------------
    @property
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise EvidenceStoreError(f"evidence store {self.path} is closed")
        key = (os.getpid(), threading.get_ident())
        conn = self._conns.get(key)
        if conn is None:
            with self._lock:
                conn = self._conns[key] = connect(self.path)
        return conn

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
        """Close this process's connections; further use raises `EvidenceStoreError`."""
        with self._lock:
            self._closed = True
            for (pid, _), conn in self._conns.items():
                if pid == os.getpid():
                    conn.close()

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
        prepared = [rows.to_row(r) for r in records]
        with self._write() as conn:
            ids, keys = rows.insert_records(conn, prepared, self._prop_keys)
        self._prop_keys.update(keys)  # only once committed: a rolled-back key never existed
        return ids

    def record_run(self, run_id: str, config: Mapping[str, Any] | None = None) -> None:
        """Note a run and its configuration; a configuration once recorded is kept."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, created, config) VALUES (?, strftime('%s','now'), ?) "
                "ON CONFLICT (run_id) DO UPDATE SET config = excluded.config "
                "WHERE runs.config = '{}'",
                (run_id, rows.dumps(dict(config or {}), "run config")),
            )

    def run_config(self, run_id: str) -> dict[str, Any]:
        """The configuration recorded for a run (empty when none was).

        Raises:
            EvidenceStoreError: the store has never heard of the run.
        """
        row = self._conn.execute("SELECT config FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise EvidenceStoreError(f"{self.path} has no run {run_id!r}")
        return dict(json.loads(row[0]))

    def record_round(
        self, run_id: str, round: int, *, candidate_commit: str | None = None, note: str = ""
    ) -> None:
        """Note a round, the candidate commit its evidence was taken on, and an optional note."""
        rows.check_round(round)
        with self._write() as conn:
            rows.ensure_round(conn, run_id, round, None)
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
        rows.check_round(round)
        if isinstance(diagnosis, BaseModel):
            diagnosis = diagnosis.model_dump(mode="json")
        if not isinstance(diagnosis, Mapping):
            raise EvidenceStoreError(
                f"a diagnosis must be a mapping, not {type(diagnosis).__name__}"
            )
        record = DiagnosisRecord(run_id=run_id, round=round, diagnosis=dict(diagnosis))
        with self._write() as conn:
            return rows.insert_diagnoses(conn, [record])[0]

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
        found = self._conn.execute(f"{SELECT_RECORDS}{clause} ORDER BY e.record_id", params)
        return [rows.from_row(row) for row in found]

    def get(self, record_id: int) -> EvidenceRecord:
        """One record by id.

        Raises:
            EvidenceStoreError: no record has that id.
        """
        sql = f"{SELECT_RECORDS} WHERE e.record_id = ?"
        row = self._conn.execute(sql, (record_id,)).fetchone()
        if row is None:
            raise EvidenceStoreError(f"{self.path} has no evidence record {record_id}")
        return rows.from_row(row)

    def count(self) -> int:
        """How many evidence records the store holds."""
        return int(self._conn.execute("SELECT count(*) FROM evidence").fetchone()[0])

    def evidence_rounds(self) -> list[int]:
        """The rounds that have at least one evidence record, ascending."""
        found = self._conn.execute("SELECT DISTINCT round FROM evidence ORDER BY round")
        return [r[0] for r in found]

    def rounds(self) -> list[RoundInfo]:
        """Every round the store has heard of (through evidence, diagnoses or `record_round`)."""
        found = self._conn.execute(
            "SELECT run_id, round, started, candidate_commit, note FROM rounds "
            "ORDER BY round, run_id"
        )
        return [
            RoundInfo(run_id=r[0], round=r[1], started=r[2], candidate_commit=r[3], note=r[4])
            for r in found
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
        return self._latest(f"{SELECT_RECORDS} WHERE", up_to_round)

    def _latest(self, select: str, up_to_round: int | None) -> dict[str, EvidenceRecord]:
        found = self._conn.execute(
            f"{select} e.record_id IN ({LATEST_IDS}) ORDER BY e.property_id",
            {"limit": NO_ROUND_LIMIT if up_to_round is None else up_to_round},
        )
        return {row[4]: rows.from_row(row) for row in found}

    # ---- views --------------------------------------------------------------------------------
    def transitions(self, a: int, b: int) -> views.Transitions:
        """How each property's latest outcome moved from the state after round `a` to after `b`."""
        with self._snapshot():
            before, after = self.latest(up_to_round=a), self.latest(up_to_round=b)
        return views.transitions(before, after, a, b)

    def summary(self, *, up_to_round: int | None = None) -> views.Summary:
        """Counts of latest outcomes per outcome, kind and level."""
        counts = self._conn.execute(
            "SELECT p.kind, p.level, e.outcome, count(*) FROM evidence e JOIN properties p "
            f"USING (prop_key) WHERE e.record_id IN ({LATEST_IDS}) GROUP BY 1, 2, 3",
            {"limit": NO_ROUND_LIMIT if up_to_round is None else up_to_round},
        )
        return views.summarize_counts(counts, up_to_round)

    def render_for_prompt(
        self,
        max_chars: int = 4000,
        *,
        up_to_round: int | None = None,
        previous_round: int | None = None,
    ) -> str:
        """The evidence of a state for a reader, never longer than `max_chars` (see `reading`).

        It names the candidate commit the round's evidence was taken on, what changed
        since `previous_round`, and one whole block per property, most urgent first;
        properties that do not fit are dropped whole and counted. Records of kinds that
        are not about the candidate (`views.NON_CANDIDATE_KINDS`) are left out.

        Args:
            previous_round: the state changes are measured against; by default the latest
                round with evidence before `up_to_round` (none: no changes shown).
        """
        with self._snapshot() as conn:
            if up_to_round is None:
                up_to_round = conn.execute("SELECT max(round) FROM evidence").fetchone()[0]
            if previous_round is None and up_to_round is not None:
                previous_round = conn.execute(
                    "SELECT max(round) FROM evidence WHERE round < ?", (up_to_round,)
                ).fetchone()[0]
            limit = {"limit": NO_ROUND_LIMIT if up_to_round is None else up_to_round}
            state = rows.latest_state(conn, limit)
            found = conn.execute(
                f"{SELECT_BLOCKS} WHERE e.record_id IN (SELECT value FROM json_each(?))",
                (json.dumps(state.record_ids),),
            )
            problem_rows = {row[4]: row for row in found}
            previous = None if previous_round is None else self._outcomes(previous_round)
            commit = None if up_to_round is None else self.round_commit(up_to_round)
        return reading.render_seen(
            state.problems,
            lambda pid: rows.from_row(problem_rows[pid]),
            state.established,
            previous,
            reimplemented=state.reimplemented,
            max_chars=max_chars,
            round=up_to_round,
            previous_round=previous_round,
            commit=commit,
        )

    def round_commit(self, round: int) -> str | None:
        """The candidate commit a round's evidence was taken on (None: not recorded)."""
        row = self._conn.execute(
            "SELECT candidate_commit FROM rounds WHERE round = ? AND candidate_commit IS NOT NULL "
            "ORDER BY run_id LIMIT 1",
            (round,),
        ).fetchone()
        return None if row is None else row[0]

    def _outcomes(self, up_to_round: int) -> dict[str, reading.Seen]:
        """Each property's latest outcome and its round, without building records."""
        found = self._conn.execute(
            f"SELECT property_id, outcome, round FROM evidence WHERE record_id IN ({LATEST_IDS})",
            {"limit": up_to_round},
        )
        return {pid: reading.Seen(OUTCOMES[outcome], round) for pid, outcome, round in found}

    # ---- exchange -----------------------------------------------------------------------------
    def export_jsonl(self, out: IO[str]) -> int:
        """Write every round, diagnosis and record as JSON Lines; return records + diagnoses."""
        with self._snapshot() as conn:
            every = conn.execute(f"{SELECT_RECORDS} ORDER BY e.record_id")
            return exchange.write_jsonl(
                out,
                rounds=self.rounds(),
                diagnoses=self.diagnoses(),
                records=(rows.from_row(r) for r in every),
            )

    def import_jsonl(self, src: IO[str]) -> int:
        """Append what `export_jsonl` wrote, in one transaction; return records + diagnoses added.

        Records and diagnoses get new ids here. Nothing is added if any line is bad.

        Raises:
            EvidenceStoreError: a line is not JSON, of an unknown type, or of a newer version.
        """
        parsed = exchange.read_jsonl(src)
        prepared = [rows.to_row(r) for r in parsed.records]
        with self._write() as conn:
            for info in parsed.rounds:
                rows.merge_round(conn, info)
            rows.insert_diagnoses(conn, parsed.diagnoses)
            rows.insert_records(conn, prepared, {})
        return len(parsed.records) + len(parsed.diagnoses)
