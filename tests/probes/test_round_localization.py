from __future__ import annotations

import pytest
from probe_fixtures import TINY

from evidence_store.records import Outcome, ProbeResult, Property
from probes.round_localization import localize_round, render_localization

SOURCE = TINY / "environment" / "source"


def _result(pid: str, outcome: Outcome, component: str | None = None, *, kind="differential", level=1):
    return ProbeResult(
        property=Property(id=pid, kind=kind, level=level),
        outcome=outcome,
        context={"component": component} if component else {},
    )


NET_BROKEN = [
    _result("net", Outcome.VIOLATED, "model.Net", level=2),
    _result("affine", Outcome.ESTABLISHED, "model.Affine"),
    _result("audit.wrapping", Outcome.VIOLATED, kind="audit", level=0),
]
AFFINE_BROKEN = [
    _result("net", Outcome.VIOLATED, "model.Net", level=2),
    _result("affine", Outcome.VIOLATED, "model.Affine"),
]
ALL_AGREE = [
    _result("net", Outcome.ESTABLISHED, "model.Net", level=2),
    _result("affine", Outcome.ESTABLISHED, "model.Affine"),
]
NOTHING_PLACED = [_result("imports", Outcome.ESTABLISHED, kind="imports", level=0)]


def test_a_divergence_names_the_component_its_probes_and_what_is_cleared_below():
    found = localize_round(SOURCE, NET_BROKEN, round=1)
    assert found.property.id == "localization" and found.property.kind == "localization"
    assert found.outcome is Outcome.VIOLATED
    obs = found.observations
    assert (obs["component"], obs["probes"], obs["established_below"]) == ("model.Net", ["net"], ["model.Affine"])
    assert obs["unplaced"] == ["audit.wrapping"] and obs["change"] == "first"
    text = render_localization(found)
    assert text.startswith("Localization after round 1: the divergence starts at model.Net")
    assert "agrees with the original below it: model.Affine" in text
    assert "violated without a component (not localized): audit.wrapping" in text


def test_nothing_diverging_is_established_and_lists_what_agrees():
    found = localize_round(SOURCE, ALL_AGREE, round=2)
    assert found.outcome is Outcome.ESTABLISHED
    assert found.observations["component"] is None
    assert found.observations["established_below"] == ["model.Affine", "model.Net"]
    assert "no divergent component" in render_localization(found)


def test_no_component_named_is_not_established():
    found = localize_round(SOURCE, NOTHING_PLACED, round=1)
    assert found.outcome is Outcome.NOT_ESTABLISHED
    assert "nothing to localize on" in render_localization(found)


def test_the_localization_itself_and_boundary_refusals_are_not_localized_on():
    earlier = localize_round(SOURCE, AFFINE_BROKEN, round=1)
    refusal = _result("boundary:x:y", Outcome.VIOLATED, "model.Net", kind="boundary")
    found = localize_round(SOURCE, [*ALL_AGREE, earlier, refusal], round=2, previous=earlier)
    assert found.outcome is Outcome.ESTABLISHED and found.observations["unplaced"] == []


@pytest.mark.parametrize(
    ("before", "after", "change", "line"),
    [
        (NET_BROKEN, NET_BROKEN, "same", "unchanged"),
        (NET_BROKEN, AFFINE_BROKEN, "moved", "moved from model.Net"),
        (AFFINE_BROKEN, ALL_AGREE, "resolved", "model.Affine no longer diverges"),
        (ALL_AGREE, AFFINE_BROKEN, "appeared", None),
        (NOTHING_PLACED, ALL_AGREE, "same", None),
    ],
)
def test_how_the_localization_changes_across_rounds(before, after, change, line):
    previous = localize_round(SOURCE, before, round=1)
    found = localize_round(SOURCE, after, round=2, previous=previous)
    assert found.observations["change"] == change
    assert found.observations["previous"] == previous.observations["component"]
    if line:
        assert line in render_localization(found)


def test_no_record_renders_nothing():
    assert render_localization(None) == ""
