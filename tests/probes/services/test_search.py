"""Counterexample search: found, shrunk, reproduced three times, saved, re-run until fixed."""

from __future__ import annotations

import json

from evidence_store.records import EvidenceRecord, Outcome
from evidence_store.store import EvidenceStore
from probes.context import make_context
from probes.rerun import rerun_record
from probes.services.python_api import python_api_probe
from probes.services.regression import loosened_since, save_regression
from probes.services.search import counterexample_probe
from task_model.loader import load_task
from tests.probes.services.conftest import ORIGINAL_LIB

SPACE = {
    "call": "verlib:parse_version",
    "alphabet": "1. x",
    "args": [{"values": ["1.2.3", "4", "0.1"], "free_text": True, "max_size": 6}],
}
# forgets to strip the version text: " 1" parses on the original and raises here
NO_STRIP = ORIGINAL_LIB.replace('parts = text.strip().split(".")', 'parts = text.split(".")')


def search(ctx, max_examples=150, **options):
    probe = counterexample_probe(
        "python_api",
        {"reference": {}, "candidate": {}},
        {"versions": SPACE},
        max_examples=max_examples,
        seconds=60,
        **options,
    )
    return {r.property.id.split(":")[0]: r for r in probe(ctx)}


def test_no_counterexample_on_an_identical_candidate(tiny_context):
    results = search(tiny_context(), max_examples=60)
    assert set(results) == {"search"}
    assert results["search"].outcome == Outcome.ESTABLISHED
    assert results["search"].observations["evaluations"] == 60


def test_counterexample_is_shrunk_reproduced_and_saved(tiny_context, tmp_path):
    ctx = tiny_context(lib=NO_STRIP)
    results = search(ctx)
    found = results["search"]
    assert found.outcome == Outcome.VIOLATED
    assert found.observations["reproduced"] == 3 and found.observations["reference_stable"]
    value = found.observations["input"]["calls"][0]["args"][0]
    assert value.strip() != value and len(value) <= 3, value  # shrunk to a space and a digit or so
    regression = results["regression"]
    assert regression.outcome == Outcome.VIOLATED
    assert regression.context["rerun"]["options"]["cases"][0]["input"] == found.observations["input"]
    assert regression.context["found_by"] == found.property.id

    store = EvidenceStore(tmp_path / "evidence.sqlite")
    record = save_regression(store, regression, run_id="r1", round=1)

    def build(task, candidate, _context):
        return make_context(load_task(task), candidate, sandbox_kind="none", workdir=tmp_path / "rerun")

    again = rerun_record(store, record.record_id, round=2, context_builder=build)
    assert again.outcome == Outcome.VIOLATED
    (ctx.candidate / "verlib.py").write_text(ORIGINAL_LIB)  # the fix
    fixed = rerun_record(store, record.record_id, round=3, context_builder=build)
    assert fixed.outcome == Outcome.ESTABLISHED
    assert fixed.property.id == record.property.id
    assert fixed.context["comparison_digest"] == record.context["comparison_digest"]


def test_search_is_deterministic_for_a_seed(tiny_context):
    first = search(tiny_context(lib=NO_STRIP), max_examples=60, seed=3)["search"].observations["input"]
    second = search(tiny_context(lib=NO_STRIP), max_examples=60, seed=3)["search"].observations["input"]
    assert json.dumps(first) == json.dumps(second)


def test_candidate_that_cannot_start_is_violated(tiny_context):
    probe = counterexample_probe(
        "python_api",
        {"reference": {"preload": ["verlib"]}, "candidate": {"preload": ["verlib"]}},
        {"versions": SPACE},
        max_examples=5,
    )
    ctx = tiny_context(lib="raise SystemError('broken at import')\n")
    [result] = probe(ctx)
    assert result.outcome == Outcome.VIOLATED
    assert "broken at import" in result.observations["reason"]


def test_a_loosened_comparison_is_named(tiny_context, tmp_path):
    cases = {"bad": [{"call": "verlib:parse_version", "args": ["x"]}]}
    ctx = tiny_context()
    strict = python_api_probe(cases, {"exception_messages": True})(ctx)[0]
    loose = python_api_probe(cases, {"exception_types": False})(ctx)[0]
    store = EvidenceStore(tmp_path / "evidence.sqlite")
    assert loosened_since(store, strict) == []
    store.append(EvidenceRecord.from_result(strict, run_id="r", round=1))
    assert loosened_since(store, strict) == []
    assert loosened_since(store, loose) == [
        "exception_types no longer compared",
        "exception_messages no longer compared",
    ]


FLAKY = ORIGINAL_LIB.replace(
    "def parse_version(text):",
    """def parse_version(text):
    import os
    marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.txt")
    with open(marker, "a") as fh:
        fh.write(".")
    if os.path.getsize(marker) % 2:
        return None""",
)


def test_a_difference_that_does_not_recur_is_not_a_verdict(tiny_context):
    results = search(tiny_context(lib=FLAKY), max_examples=40)
    assert set(results) == {"search"}
    found = results["search"]
    assert found.outcome == Outcome.NOT_ESTABLISHED
    assert found.observations["found"] and found.observations["reproduced"] < 3
