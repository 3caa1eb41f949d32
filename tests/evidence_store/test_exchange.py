from __future__ import annotations

import io
import json

import pytest

from evidence_store.records import SCHEMA_VERSION
from evidence_store.schema import EvidenceStoreError
from evidence_store.store import EvidenceStore


def _filled(store, make_record) -> None:
    store.record_round("run-1", 1, candidate_commit="abc")
    store.record_diagnosis("run-1", 1, {"gaps": ["param tree"]})
    store.append_many(
        [
            make_record("a", "violated", 1, score=0.5, context={"seed": 3}, trace="boom"),
            make_record("b", "established", 1, kind="imports", level=0),
        ]
    )
    store.append(make_record("a", "established", 2))


def test_export_then_import_reproduces_records_diagnoses_and_rounds(store, make_record, tmp_path):
    _filled(store, make_record)
    out = io.StringIO()
    assert store.export_jsonl(out) == 4  # 3 records + 1 diagnosis
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == {
        "type": "header",
        "format": "twin-evidence",
        "store_version": 3,
        "record_version": SCHEMA_VERSION,
    }
    assert [x["type"] for x in lines[1:]] == ["round", "round", "diagnosis"] + ["evidence"] * 3

    with EvidenceStore(tmp_path / "copy.sqlite") as copy:
        assert copy.import_jsonl(io.StringIO(out.getvalue())) == 4
        strip = {"record_id"}
        assert [r.model_dump(exclude=strip) for r in copy.records()] == [
            r.model_dump(exclude=strip) for r in store.records()
        ]
        assert [d.diagnosis for d in copy.diagnoses()] == [{"gaps": ["param tree"]}]
        assert copy.rounds()[0].candidate_commit == "abc"
        again = io.StringIO()
        copy.export_jsonl(again)
        assert again.getvalue() == out.getvalue()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 3: not JSON"),
        ('["a list"]', "line 3: expected a JSON object"),
        ('{"type": "gossip"}', "line 3: unknown type 'gossip'"),
        (
            '{"type": "evidence", "run_id": "r", "round": 1}',
            "line 3: evidence property: Field required",
        ),
        ('{"type": "evidence", "schema_version": 99}', "line 3: written with record version 99"),
        ('{"type": "header", "format": "other"}', "line 3: not a twin-evidence export"),
    ],
)
def test_a_bad_line_is_named_and_nothing_is_imported(store, make_record, line, message):
    good = io.StringIO()
    source = EvidenceStore(store.path.with_name("source.sqlite"))
    source.append(make_record("a", "established", 1))
    source.export_jsonl(good)
    source.close()
    header, record = good.getvalue().splitlines()[0], good.getvalue().splitlines()[-1]
    with pytest.raises(EvidenceStoreError, match=message):
        store.import_jsonl(io.StringIO("\n".join([header, record, line]) + "\n"))
    assert store.count() == 0 and store.rounds() == []


def test_a_header_from_a_newer_twin_is_refused(store):
    line = json.dumps({"type": "header", "format": "twin-evidence", "record_version": 99})
    with pytest.raises(EvidenceStoreError, match="record version 99, newer than"):
        store.import_jsonl(io.StringIO(line + "\n"))


def test_an_export_of_version_1_records_imports_without_a_reference_run(store, make_record):
    out = io.StringIO()
    source = EvidenceStore(store.path.with_name("source.sqlite"))
    source.append(make_record("a", "established", 1))
    source.export_jsonl(out)
    source.close()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    header, record = lines[0], lines[-1]
    header.update(store_version=2, record_version=1)  # as a twin before reference runs wrote it
    del record["reference_run"]
    record["schema_version"] = 1
    old = "\n".join(json.dumps(x) for x in [header, *lines[1:-1], record]) + "\n"
    assert store.import_jsonl(io.StringIO(old)) == 1
    (imported,) = store.records()
    assert imported.schema_version == 1 and imported.reference_run is None
