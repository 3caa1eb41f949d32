"""The store's SQLite schema and its migrations, numbered by version.

The schema version lives in SQLite's `PRAGMA user_version`. Opening a store
applies, in one `BEGIN IMMEDIATE` transaction, every migration above the file's
version; a file written by a newer twin (a version above `STORE_VERSION`) is
refused rather than guessed at. Migrations are only ever appended to `MIGRATIONS`:
a released step is never edited, so every older store reaches the same shape.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ground.errors import TwinError


class EvidenceStoreError(TwinError):
    """The evidence store cannot be opened or used as asked (missing, corrupt, newer, bad input)."""


_V1 = """
CREATE TABLE runs (
    run_id   TEXT PRIMARY KEY,
    created  REAL NOT NULL,
    config   TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE rounds (
    run_id           TEXT NOT NULL,
    round            INTEGER NOT NULL,
    started          REAL NOT NULL,
    candidate_commit TEXT,
    note             TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, round)
);
-- One row per distinct (id, kind, level, description): a record keeps the property exactly
-- as its probe described it, even if a later probe describes the same id differently.
CREATE TABLE properties (
    prop_key     INTEGER PRIMARY KEY,
    property_id  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    level        INTEGER NOT NULL,
    description  TEXT NOT NULL,
    UNIQUE (property_id, kind, level, description)
);
CREATE TABLE evidence (
    record_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    schema_version INTEGER NOT NULL,
    run_id         TEXT NOT NULL,
    round          INTEGER NOT NULL,
    prop_key       INTEGER NOT NULL REFERENCES properties (prop_key),
    property_id    TEXT NOT NULL,
    outcome        TEXT NOT NULL CHECK (outcome IN ('established', 'violated', 'not_established')),
    score          REAL,
    context        TEXT NOT NULL,
    observations   TEXT NOT NULL,
    trace          TEXT NOT NULL,
    time           REAL NOT NULL
);
CREATE INDEX evidence_by_round ON evidence (round);
-- Records are append-only: the database itself refuses edits and deletions.
CREATE TRIGGER evidence_no_update BEFORE UPDATE ON evidence
BEGIN SELECT RAISE(ABORT, 'evidence records are append-only'); END;
CREATE TRIGGER evidence_no_delete BEFORE DELETE ON evidence
BEGIN SELECT RAISE(ABORT, 'evidence records are append-only'); END;
"""

_V2 = """
CREATE TABLE diagnoses (
    diagnosis_id   INTEGER PRIMARY KEY AUTOINCREMENT,
    schema_version INTEGER NOT NULL,
    run_id         TEXT NOT NULL,
    round          INTEGER NOT NULL,
    diagnosis      TEXT NOT NULL,
    time           REAL NOT NULL
);
CREATE INDEX diagnoses_by_round ON diagnoses (round);
CREATE TRIGGER diagnoses_no_update BEFORE UPDATE ON diagnoses
BEGIN SELECT RAISE(ABORT, 'diagnoses are append-only'); END;
CREATE TRIGGER diagnoses_no_delete BEFORE DELETE ON diagnoses
BEGIN SELECT RAISE(ABORT, 'diagnoses are append-only'); END;
-- Serves the latest-outcome-per-property view: one index seek per property.
CREATE INDEX evidence_latest ON evidence (property_id, round DESC, record_id DESC);
"""

_V3 = """
-- What a matched probe's reference ran of the components it names (records of schema version 2): JSON, or NULL.
ALTER TABLE evidence ADD COLUMN reference_run TEXT;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)
"""`MIGRATIONS[i]` takes a store from version i to version i + 1."""

STORE_VERSION = len(MIGRATIONS)
"""The schema version this twin writes and understands."""

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's write transaction before giving up."""


def connect(path: Path) -> sqlite3.Connection:
    """Open `path` in WAL mode with autocommit, so transactions are explicit (`BEGIN IMMEDIATE`).

    Raises:
        EvidenceStoreError: the file is not a SQLite database.
    """
    try:
        # Each thread uses its own connection; check_same_thread=False only lets `close()`
        # close them all from whichever thread calls it.
        conn = sqlite3.connect(
            path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # WAL: readers never block the writer and never see a half-committed transaction;
        # a killed writer's uncommitted frames are ignored on the next open. NORMAL sync keeps
        # every committed transaction across a killed process (only power loss may drop the last).
        mode = _set_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        raise EvidenceStoreError(f"{path} is not an evidence store ({exc})") from None
    if str(mode).lower() != "wal":
        conn.close()
        raise EvidenceStoreError(f"{path}: cannot switch to WAL mode (journal mode is {mode})")
    return conn


def migrate(conn: sqlite3.Connection, path: Path, *, target: int = STORE_VERSION) -> int:
    """Bring the schema up to `target`; return the version the file had before.

    The version is read again inside the write transaction, so several processes
    opening the same new file at once apply each migration exactly once.

    Raises:
        EvidenceStoreError: the file was written by a newer twin, or is not an evidence store.
    """
    version = _user_version(conn, path)
    _refuse_newer(version, path)
    if version >= target:
        return version
    try:
        conn.execute("BEGIN IMMEDIATE")
        before = _user_version(conn, path)
        _refuse_newer(before, path)
        if before == 0 and _has_foreign_tables(conn):
            raise EvidenceStoreError(f"{path} is a SQLite database but not an evidence store")
        for step in range(before, target):
            for statement in _statements(MIGRATIONS[step]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {step + 1}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return before


def _user_version(conn: sqlite3.Connection, path: Path) -> int:
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise EvidenceStoreError(f"{path} is not an evidence store ({exc})") from None


def _refuse_newer(version: int, path: Path) -> None:
    if version > STORE_VERSION:
        raise EvidenceStoreError(
            f"{path} has evidence schema version {version}, newer than the {STORE_VERSION} this "
            "twin understands; open it with a newer twin"
        )


def _has_foreign_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
    return bool(row[0])


def _statements(script: str) -> list[str]:
    """Split a migration into statements (`executescript` would commit the open transaction)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        raise ValueError(f"incomplete statement in migration: {current.strip()[:60]}")
    return statements


def _set_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL; retried, since that switch returns "locked" without waiting on the busy handler."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
