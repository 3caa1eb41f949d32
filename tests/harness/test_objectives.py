"""A property established only against a re-implementation of an interface component does not hold yet."""

from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome, Property, ReferenceRun
from harness.scaffolds.twin.objectives import all_shown, holds, objective_statuses
from roles.schemas import Diagnosis, Gap


def _record(pid: str, outcome: str = "established", **run) -> EvidenceRecord:
    return EvidenceRecord(
        run_id="r",
        round=1,
        outcome=Outcome(outcome),
        property=Property(id=pid, kind="differential", level=2),
        reference_run=ReferenceRun(**run) if run else None,
    )


FIT = "litgpt.finetune.lora.fit"
LATEST = {
    "finetune.fit": _record("finetune.fit", not_ran=[FIT], on_interface=[FIT]),
    "finetune.grads": _record("finetune.grads", not_ran=["litgpt.helper"]),  # not on the interface
    "finetune.loss": _record("finetune.loss", ran=["litgpt.utils.chunked_cross_entropy"]),
    "model.gpt": _record("model.gpt"),  # recorded before the reference's run was
}


def test_only_a_re_implementation_of_an_interface_component_keeps_an_established_property_from_holding():
    assert not holds(LATEST["finetune.fit"])
    assert holds(LATEST["finetune.grads"]) and holds(LATEST["finetune.loss"]) and holds(LATEST["model.gpt"])
    assert not holds(_record("x", "violated"))


def test_an_objective_on_a_property_shown_only_against_a_re_implementation_stays_open_and_asks_for_a_verifier():
    diagnosis = Diagnosis(
        summary="s",
        gaps=[
            Gap(title="fit", objective="log as litgpt logs", evidence=["finetune.fit"]),
            Gap(title="loss", objective="chunks", evidence=["finetune.loss", "finetune.grads"]),
        ],
    )
    statuses = dict(objective_statuses(diagnosis, LATEST))
    assert statuses["fit: log as litgpt logs"] == (
        "open: finetune.fit established only against a re-implementation (not yet established)"
    )
    assert statuses["loss"] == "done"
    assert not all_shown(diagnosis, LATEST)
    assert all_shown(Diagnosis(summary="s", gaps=[diagnosis.gaps[1]]), LATEST)


def test_a_complete_diagnosis_does_not_end_the_run_while_such_a_property_is_left(tmp_path):
    from types import SimpleNamespace

    from evidence_store.store import EvidenceStore
    from evidence_store.views import candidate_latest
    from harness.scaffolds.twin.loop import TwinLoop

    with EvidenceStore(tmp_path / "e.sqlite") as store:
        store.record_diagnosis("r", 2, Diagnosis(summary="nothing left", gaps=[], complete=True))
        store.append_many([LATEST["finetune.loss"]])
        loop = SimpleNamespace(store=store, candidate_latest=lambda t: candidate_latest(store.latest(up_to_round=t)))
        assert TwinLoop.nothing_left(loop, 2)
        store.append_many([LATEST["finetune.fit"]])
        assert not TwinLoop.nothing_left(loop, 2)
