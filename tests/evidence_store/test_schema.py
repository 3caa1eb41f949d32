from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from evidence_store.records import Outcome
from evidence_store.schema import (
    MIGRATIONS,
    STORE_VERSION,
    EvidenceStoreError,
    _statements,
    connect,
    migrate,
)
from evidence_store.store import EvidenceStore


def _user_version(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def test_a_new_store_is_at_the_current_version_in_wal_mode(tmp_path):
    with EvidenceStore(tmp_path / "e.sqlite") as store:
        assert store.migrated_from == 0
        mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert _user_version(tmp_path / "e.sqlite") == STORE_VERSION == len(MIGRATIONS)


def test_a_store_from_a_newer_twin_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "e.sqlite"
    EvidenceStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {STORE_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(
        EvidenceStoreError, match=rf"schema version {STORE_VERSION + 1}, newer than"
    ):
        EvidenceStore(path)
    assert _user_version(path) == STORE_VERSION + 1


def test_a_version_1_store_is_migrated_and_keeps_its_records(tmp_path):
    path = tmp_path / "e.sqlite"
    conn = connect(path)
    assert migrate(conn, path, target=1) == 0
    conn.execute(
        "INSERT INTO properties (property_id, kind, level, description) "
        "VALUES ('imports', 'imports', 0, 'the candidate imports')"
    )
    conn.execute(
        "INSERT INTO evidence (schema_version, run_id, round, prop_key, property_id, outcome, "
        "score, context, observations, trace, time) "
        "VALUES (1, 'old-run', 1, 1, 'imports', 'violated', NULL, '{}', '{}', 'boom', 1.0)"
    )
    conn.close()
    assert _user_version(path) == 1
    with pytest.raises(sqlite3.OperationalError):  # version 1 had no diagnoses
        sqlite3.connect(path).execute("SELECT * FROM diagnoses")

    with EvidenceStore(path) as store:
        assert store.migrated_from == 1
        assert store.latest()["imports"].outcome == Outcome.VIOLATED
        assert store.get(1).trace == "boom"
        store.record_diagnosis("old-run", 2, {"gaps": []})
        assert len(store.diagnoses()) == 1
    assert _user_version(path) == STORE_VERSION


def test_opening_again_does_not_migrate_twice(tmp_path):
    EvidenceStore(tmp_path / "e.sqlite").close()
    with EvidenceStore(tmp_path / "e.sqlite") as again:
        assert again.migrated_from == STORE_VERSION


def test_every_migration_splits_into_complete_statements():
    for script in MIGRATIONS:
        statements = _statements(script)
        assert statements and all(sqlite3.complete_statement(s) for s in statements)
    with pytest.raises(ValueError, match="incomplete"):
        _statements("CREATE TABLE t (x INTEGER")


_OPEN_AND_APPEND = """
import sys
from evidence_store.records import EvidenceRecord, Property
from evidence_store.store import EvidenceStore
with EvidenceStore(sys.argv[1]) as store:
    store.append(EvidenceRecord(run_id="r", round=0, outcome="established",
                                property=Property(id=sys.argv[2], kind="imports")))
"""


def test_several_processes_creating_the_same_store_at_once_migrate_it_once(tmp_path):
    path = tmp_path / "e.sqlite"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AND_APPEND, str(path), f"p{i}"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    with EvidenceStore(path) as store:
        assert sorted(store.latest()) == ["p0", "p1", "p2", "p3"]
    assert _user_version(path) == STORE_VERSION


def test_a_version_2_store_is_migrated_and_its_records_read_without_a_reference_run(tmp_path):
    from evidence_store.records import EvidenceRecord, Property, ReferenceRun

    path = tmp_path / "e.sqlite"
    conn = connect(path)
    assert migrate(conn, path, target=2) == 0
    conn.execute(
        "INSERT INTO properties (property_id, kind, level, description) VALUES ('fit', 'differential', 2, '')"
    )
    conn.execute(
        "INSERT INTO evidence (schema_version, run_id, round, prop_key, property_id, outcome, "
        "score, context, observations, trace, time) "
        "VALUES (1, 'old-run', 1, 1, 'fit', 'established', 1.0, '{}', '{}', '', 1.0)"
    )
    conn.close()
    with EvidenceStore(path) as store:
        assert store.migrated_from == 2
        old = store.get(1)
        assert old.schema_version == 1 and old.reference_run is None and old.reimplemented == []
        new = EvidenceRecord(
            run_id="old-run",
            round=2,
            property=Property(id="fit", kind="differential", level=2),
            outcome=Outcome.ESTABLISHED,
            reference_run=ReferenceRun(ran=[], not_ran=["pkg.fit"], on_interface=["pkg.fit"]),
        )
        got = store.get(store.append(new))
        assert got.schema_version == 2 and got.reimplemented == ["pkg.fit"] and got.open_on_interface == ["pkg.fit"]
    assert _user_version(path) == STORE_VERSION == 3
