"""The re-implementation mark's words: the qualified outcome and the line that says why."""

from __future__ import annotations

import pytest

from evidence_store.records import EvidenceRecord, Outcome, Property, ReferenceRun
from evidence_store.reimplementation import outcome_text, reimplementation_line


def _rec(reference_run: ReferenceRun | None) -> EvidenceRecord:
    prop = Property(id="fit", kind="differential", level=2, description="fit matches the original")
    return EvidenceRecord(run_id="r", round=1, outcome=Outcome.ESTABLISHED, property=prop, reference_run=reference_run)


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("never ran", "the reference never ran pkg.fit: the probe compared against its own re-implementation"),
        ("", "the reference never ran pkg.fit: the probe compared against its own re-implementation"),
        ("unchanged", "the reference's outputs stayed the same when pkg.fit gave other values or did nothing"),
        ("trace disturbed", "the probe removed or replaced the hook that records what its reference ran of pkg.fit"),
        ("trace missing", "the reference's run left no record of what it ran of pkg.fit"),
    ],
)
def test_the_line_says_why_the_output_did_not_come_from_the_component(reason, said):
    run = ReferenceRun(ran=["pkg.fit"], not_ran=["pkg.fit"], reason=reason, on_interface=["pkg.fit"])
    line = reimplementation_line(_rec(run))
    assert line.startswith(said) and line.endswith("; on the task's interface: pkg.fit")


def test_a_record_whose_output_came_from_its_component_is_not_qualified():
    ran = ReferenceRun(ran=["pkg.fit"], counterfactual="changed")
    assert outcome_text(_rec(ran)) == "established" and reimplementation_line(_rec(ran)) == ""
    assert outcome_text(_rec(None)) == "established"  # recorded before the reference's run was
    marked = ReferenceRun(ran=["pkg.fit"], not_ran=["pkg.fit"], reason="unchanged", counterfactual="unchanged")
    assert outcome_text(_rec(marked)) == "established (against a re-implementation)"
