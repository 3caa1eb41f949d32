from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from evidence_store.records import SCHEMA_VERSION, Outcome, Property
from evidence_store.schema import EvidenceStoreError
from evidence_store.store import STORE_FILENAME, EvidenceStore


def test_append_returns_ids_and_get_round_trips_every_field(store, make_record):
    original = make_record(
        "forward.logits",
        "violated",
        2,
        kind="differential",
        level=2,
        score=0.25,
        context={"seed": 7, "probe": "def probe(): ...", "candidate_commit": "abc123"},
        observations={"per_output": {"logits": 0.25}, "noise_floor": 1e-6},
        trace="Traceback ...\nValueError: bad shape",
    )
    ids = store.append_many([original, make_record("imports", "established", 2, kind="imports")])
    assert ids == [ids[0], ids[0] + 1]
    got = store.get(ids[0])
    assert got.record_id == ids[0]
    assert got.model_dump(exclude={"record_id"}) == original.model_dump(exclude={"record_id"})
    assert got.property == Property(id="forward.logits", kind="differential", level=2)
    assert store.count() == 2


def test_records_filters_by_round_kind_and_property(store, make_record):
    store.append_many(
        [
            make_record("a", "established", 0, kind="imports"),
            make_record("b", "violated", 1),
            make_record("a", "violated", 1, kind="imports"),
        ]
    )
    assert [r.property.id for r in store.records()] == ["a", "b", "a"]
    assert [r.property.id for r in store.records(round=1)] == ["b", "a"]
    assert [r.round for r in store.records(kind="imports")] == [0, 1]
    assert [r.outcome for r in store.records(property_id="a", round=1)] == [Outcome.VIOLATED]
    assert store.records(kind="nope") == []


def test_latest_takes_the_latest_round_then_the_latest_append(store, make_record):
    store.append(make_record("p", "violated", 1))
    store.append(make_record("p", "established", 3))
    store.append(make_record("q", "not_established", 2))
    # A re-run filed under an earlier round later on must not mask round 3's evidence.
    store.append(make_record("p", "violated", 1))
    store.append(make_record("q", "established", 2))
    latest = store.latest()
    assert latest["p"].outcome == Outcome.ESTABLISHED and latest["p"].round == 3
    assert latest["q"].outcome == Outcome.ESTABLISHED
    before = store.latest(up_to_round=1)
    assert set(before) == {"p"} and before["p"].record_id == 4
    assert store.latest(up_to_round=0) == {}


def test_a_property_keeps_each_records_own_description(store, make_record):
    store.append(make_record("p", "violated", 1, level=1))
    store.append(make_record("p", "established", 2, level=3))
    assert [r.property.level for r in store.records(property_id="p")] == [1, 3]


def test_records_are_append_only_in_the_file_itself(store, make_record):
    store.append(make_record("p", "violated", 1))
    store.record_diagnosis("run-1", 1, {"gaps": []})
    conn = sqlite3.connect(store.path)
    for statement in (
        "UPDATE evidence SET outcome = 'established'",
        "DELETE FROM evidence",
        "UPDATE diagnoses SET diagnosis = '{}'",
        "DELETE FROM diagnoses",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    conn.close()
    assert store.get(1).outcome == Outcome.VIOLATED


def test_numpy_values_and_paths_in_context_are_stored_as_json(store, make_record):
    rid = store.append(
        make_record(
            "p",
            "established",
            0,
            context={"shape": np.array([2, 3]), "where": Path("/app")},
            observations={"score": np.float32(0.5)},
        )
    )
    got = store.get(rid)
    assert got.context == {"shape": [2, 3], "where": "/app"}
    assert got.observations == {"score": 0.5}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"round": -1}, "non-negative"),
        ({"context": {"x": object()}}, "cannot be stored as JSON"),
        ({"schema_version": SCHEMA_VERSION + 1}, "newer"),
    ],
)
def test_bad_records_are_refused_and_nothing_of_the_batch_is_written(
    store, make_record, change, message
):
    good = make_record("ok", "established", 0)
    bad = make_record("bad", "violated", 0).model_copy(update=change)
    with pytest.raises(EvidenceStoreError, match=message):
        store.append_many([good, bad])
    assert store.count() == 0


def test_appending_something_that_is_not_a_record_is_refused(store):
    with pytest.raises(EvidenceStoreError, match="EvidenceRecord"):
        store.append({"property": "p"})  # type: ignore[arg-type]


def test_get_of_a_missing_record_is_a_clear_error(store):
    with pytest.raises(EvidenceStoreError, match="no evidence record 42"):
        store.get(42)


class _Diagnosis(BaseModel):
    gaps: list[str]


def test_diagnoses_are_kept_per_round(store):
    store.record_diagnosis("run-1", 1, {"gaps": ["param tree"], "objectives": []})
    store.record_diagnosis("run-1", 2, _Diagnosis(gaps=["loss"]))
    assert [d.diagnosis for d in store.diagnoses()] == [
        {"gaps": ["param tree"], "objectives": []},
        {"gaps": ["loss"]},
    ]
    [second] = store.diagnoses(round=2)
    assert second.diagnosis_id == 2 and second.run_id == "run-1"
    with pytest.raises(EvidenceStoreError, match="mapping"):
        store.record_diagnosis("run-1", 3, ["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(EvidenceStoreError, match="non-negative"):
        store.record_diagnosis("run-1", -2, {})


def test_rounds_keep_the_candidate_commit_and_note(store, make_record):
    store.append(make_record("p", "violated", 1))
    store.record_round("run-1", 1, candidate_commit="c0ffee")
    store.record_round("run-1", 2, note="stopped: all established")
    store.record_round("run-1", 1, note="regressed")
    rounds = {r.round: r for r in store.rounds()}
    assert rounds[1].candidate_commit == "c0ffee" and rounds[1].note == "regressed"
    assert rounds[2].candidate_commit is None and rounds[2].note == "stopped: all established"
    assert store.evidence_rounds() == [1]


def test_open_run_accepts_a_directory_or_an_id_under_runs(tmp_path, monkeypatch, make_record):
    run_dir = tmp_path / "runs" / "r-7"
    run_dir.mkdir(parents=True)
    with EvidenceStore.open_run(run_dir) as s:
        s.append(make_record("p", "established", 0))
    monkeypatch.chdir(tmp_path)
    with EvidenceStore.open_run("r-7", create=False) as s:
        assert s.path == Path("runs") / "r-7" / STORE_FILENAME
        assert s.count() == 1
    with pytest.raises(EvidenceStoreError, match="no run directory 'r-8'"):
        EvidenceStore.open_run("r-8")


def test_opening_without_create_needs_an_existing_store(tmp_path):
    with pytest.raises(EvidenceStoreError, match="no evidence store"):
        EvidenceStore(tmp_path / "evidence.sqlite", create=False)
    assert not (tmp_path / "evidence.sqlite").exists()
    with pytest.raises(EvidenceStoreError, match="not a directory"):
        EvidenceStore(tmp_path / "missing" / "evidence.sqlite")


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    junk = tmp_path / "evidence.sqlite"
    junk.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(EvidenceStoreError, match="not an evidence store"):
        EvidenceStore(junk)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(EvidenceStoreError, match="not an evidence store"):
        EvidenceStore(other)


def test_a_closed_store_says_so(tmp_path):
    s = EvidenceStore(tmp_path / "e.sqlite")
    s.close()
    with pytest.raises(EvidenceStoreError, match="closed"):
        s.count()


def test_a_forked_child_uses_its_own_connection(store, make_record):
    store.append(make_record("parent", "established", 0))
    pid = os.fork()
    if pid == 0:  # child: append through the inherited object, then leave without cleanup
        try:
            store.append(make_record("child", "violated", 0))
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(store.latest()) == ["child", "parent"]


def test_a_runs_configuration_is_recorded_once(store, make_record):
    store.append(make_record("p", "established", 0, run_id="r9"))
    assert store.run_config("r9") == {}
    store.record_run("r9", {"model": "replay:x", "rounds": 2})
    store.record_run("r9", {"model": "other"})
    assert store.run_config("r9") == {"model": "replay:x", "rounds": 2}
    with pytest.raises(EvidenceStoreError, match="no run 'r10'"):
        store.run_config("r10")
    with pytest.raises(EvidenceStoreError, match="cannot be stored as JSON"):
        store.record_run("r11", {"x": object()})


def test_a_reference_run_round_trips_and_an_unrecorded_one_stays_none(store, make_record):
    from evidence_store.records import FrameworkCall, ReferenceRun

    run = ReferenceRun(
        ran=["pkg.train.loss_fn"],
        not_ran=["pkg.train.fit"],
        on_interface=[],
        calls=[FrameworkCall(name="torch.optim.AdamW.step", caller="pkg.train.step", count=3)],
    )
    traced = store.append(make_record("fit", "established", 1, reference_run=run))
    plain = store.append(make_record("imports", "established", 1, kind="imports"))
    assert store.get(traced).reference_run == run
    assert store.get(traced).reimplemented == ["pkg.train.fit"]
    assert store.get(plain).reference_run is None and store.get(plain).reimplemented == []
