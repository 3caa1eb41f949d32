from __future__ import annotations

import textwrap

import pytest

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.store import EvidenceStore
from probes.rerun import RerunError, RerunSpec, rerun_record
from tests.evidence_store.conftest import record


@pytest.fixture
def store(tmp_path):
    with EvidenceStore(tmp_path / "evidence.sqlite") as opened:
        yield opened


@pytest.fixture
def make_record():
    return record

# A probe factory as a probe module would define one: options in, `probe(ctx) -> ProbeResult` out.
FACTORY_MODULE = textwrap.dedent("""
    from evidence_store.records import ProbeResult, Property

    CALLS = []

    def threshold_probe(limit, property_id="value.below_limit"):
        def probe(ctx):
            CALLS.append(ctx)
            value = ctx["value"]
            return ProbeResult(
                property=Property(id=property_id, kind="differential", level=1),
                outcome="established" if value < limit else "violated",
                score=min(1.0, value / limit),
                observations={"value": value, "limit": limit},
            )
        return probe

    def crashing_probe():
        def probe(ctx):
            raise KeyError("output 'logits' missing")
        return probe

    def several(property_ids):
        def probe(ctx):
            return [ProbeResult(property=Property(id=p, kind="jit"), outcome="established")
                    for p in property_ids]
        return probe

    not_a_factory = 3

    def returns_data():
        return {"not": "callable"}
""")


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "rerun_factories.py").write_text(FACTORY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rerun_factories

    yield rerun_factories
    monkeypatch.delitem(__import__("sys").modules, "rerun_factories")


def _stored(
    store,
    factory: str,
    options: dict,
    *,
    round: int = 1,
    pid: str = "value.below_limit",
    **spec_fields: str,
) -> int:
    spec = RerunSpec(
        factory=factory,
        options=options,
        task="/tasks/t1",
        candidate="/runs/r/candidate",
        **spec_fields,
    )
    record = EvidenceRecord(
        run_id="run-1",
        round=round,
        outcome=Outcome.ESTABLISHED,
        property=Property(id=pid, kind="differential", level=1),
        context={"rerun": spec.to_context(), "candidate_commit": "abc123", "seed": 0},
    )
    return store.append(record)


def _builder(value: float):
    seen = []

    def build(task_dir, candidate, context):
        seen.append((str(task_dir), str(candidate), context["candidate_commit"]))
        return {"value": value}

    build.seen = seen  # type: ignore[attr-defined]
    return build


def test_rerun_executes_the_factory_and_appends_the_new_result(store, factories):
    rid = _stored(store, "rerun_factories:threshold_probe", {"limit": 10.0})
    build = _builder(12.0)
    new = rerun_record(store, rid, context_builder=build)
    assert build.seen == [("/tasks/t1", "/runs/r/candidate", "abc123")]
    assert new.record_id == rid + 1 and store.get(new.record_id).outcome == Outcome.VIOLATED
    assert new.round == 1 and new.run_id == "run-1"
    assert new.observations == {"value": 12.0, "limit": 10.0}
    assert new.context["rerun_of"] == rid
    assert new.context["rerun"]["factory"] == "rerun_factories:threshold_probe"
    # The new record is itself re-runnable, and can be filed under another round.
    again = rerun_record(store, new.record_id, round=3, context_builder=_builder(1.0))
    assert again.round == 3 and again.outcome == Outcome.ESTABLISHED
    assert store.latest()["value.below_limit"].record_id == again.record_id


def test_a_probe_that_raises_is_recorded_as_not_established_with_its_trace(store, factories):
    rid = _stored(store, "rerun_factories:crashing_probe", {})
    new = rerun_record(store, rid, context_builder=_builder(0.0))
    assert new.outcome == Outcome.NOT_ESTABLISHED
    assert "KeyError" in new.trace and "logits" in new.observations["rerun_error"]
    assert new.property.id == "value.below_limit"
    assert store.count() == 2


def test_a_probe_returning_several_results_contributes_the_one_for_the_record(store, factories):
    rid = _stored(
        store, "rerun_factories:several", {"property_ids": ["jit.step", "jit.init"]}, pid="jit.init"
    )
    new = rerun_record(store, rid, context_builder=_builder(0.0))
    assert new.property.id == "jit.init" and new.property.kind == "jit"
    missing = _stored(store, "rerun_factories:several", {"property_ids": ["jit.step"]}, pid="jit.x")
    with pytest.raises(RerunError, match="no result for 'jit.x'"):
        rerun_record(store, missing, context_builder=_builder(0.0))


@pytest.mark.parametrize(
    ("factory", "options", "message"),
    [
        ("no_colon_here", {}, "is not 'package.module:function'"),
        ("no_such_module_xyz:f", {}, "cannot load probe factory"),
        ("rerun_factories:missing", {}, "cannot load probe factory"),
        ("rerun_factories:threshold_probe", {"wrong": 1}, "rejected its options"),
        ("rerun_factories:not_a_factory", {}, "rejected its options|not a probe"),
        ("rerun_factories:returns_data", {}, "returned dict, not a probe"),
    ],
)
def test_an_unusable_factory_is_a_clear_error_and_appends_nothing(
    store, factories, factory, options, message
):
    rid = _stored(store, factory, options)
    with pytest.raises(RerunError, match=message):
        rerun_record(store, rid, context_builder=_builder(0.0))
    assert store.count() == 1


def test_a_record_without_a_usable_spec_cannot_be_rerun(store, make_record):
    plain = store.append(make_record("p", "violated", 1))
    with pytest.raises(RerunError, match="no 'rerun' entry"):
        rerun_record(store, plain, context_builder=_builder(0.0))
    broken = store.append(make_record("q", "violated", 1, context={"rerun": {"options": {}}}))
    with pytest.raises(RerunError, match="bad rerun spec: factory"):
        rerun_record(store, broken, context_builder=_builder(0.0))
    no_task = store.append(make_record("r", "violated", 1, context={"rerun": {"factory": "m:f"}}))
    with pytest.raises(RerunError, match="names no task; give one"):
        rerun_record(store, no_task, context_builder=_builder(0.0))
    assert store.count() == 3


def test_a_spec_without_task_and_candidate_runs_on_the_ones_given(store, factories):
    # As the built-in probes write it: factory and options only.
    record = EvidenceRecord(
        run_id="run-1",
        round=2,
        outcome=Outcome.VIOLATED,
        property=Property(id="value.below_limit", kind="differential", level=1),
        context={
            "rerun": {"factory": "rerun_factories:threshold_probe", "options": {"limit": 5.0}},
            "candidate_commit": "old",
            "seed": 4,
        },
    )
    rid = store.append(record)
    build_seen_commit = []

    def recording_build(task_dir, candidate, context):
        build_seen_commit.append(context.get("candidate_commit"))
        return {"value": 1.0}

    new = rerun_record(
        store, rid, task="/tasks/t9", candidate="/runs/r/round-3", context_builder=recording_build
    )
    assert new.outcome == Outcome.ESTABLISHED
    assert new.context["rerun"] == {
        "factory": "rerun_factories:threshold_probe",
        "options": {"limit": 5.0},
        "task": "/tasks/t9",
        "candidate": "/runs/r/round-3",
    }
    # Another candidate: the original's commit is neither passed on nor carried over.
    assert build_seen_commit == [None] and "candidate_commit" not in new.context
    assert new.context["seed"] == 4
