"""The Verifier's probe desk: what run_probe returns, and how a probe file's own errors are superseded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from evidence_store.records import EvidenceRecord, Outcome, ProbeResult, Property
from evidence_store.store import EvidenceStore
from evidence_store.views import NON_CANDIDATE_KINDS, round_tally
from harness.scaffolds.twin.probe_desk import RunProbeDesk, render_results
from probes.probe_format import ACCEPTED_FORMS, PROBE_FILE_KIND
from task_model.loader import load_task


def _probe_record(n_outputs: int, failing: list[int]) -> EvidenceRecord:
    outputs = {
        f"layer{i:03}": {
            "measure": "tensor",
            "score": 1.0 - (0.5 if i in failing else i * 1e-8),
            "noise": 1e-7,
            "tolerance": 1e-5,
            "ok": i not in failing,
        }
        for i in range(n_outputs)
    }
    return EvidenceRecord(
        property=Property(id="forward.layers", kind="differential", level=1),
        outcome=Outcome.VIOLATED if failing else Outcome.ESTABLISHED,
        observations={"outputs": outputs, "structure": []},
        run_id="r",
        round=1,
    )


def test_run_probe_lists_failing_outputs_and_summarises_the_passing_ones():
    text = render_results([_probe_record(300, failing=[7, 250])])
    lines = text.splitlines()
    assert lines[0] == "1 properties recorded: established=0 violated=1 not_established=0"
    assert [line.split(":")[0].strip() for line in lines[2:4]] == ["layer007", "layer250"]
    assert "298 outputs pass; closest to their tolerance:" in text
    assert [line.split(":")[0].strip() for line in lines[5:8]] == ["layer299", "layer298", "layer297"]
    assert "… 295 more passing (not listed)" in text
    assert len(lines) < 12  # 300 outputs, a screen of text


def test_run_probe_tells_the_verifier_its_reference_never_ran_the_component_it_names():
    from evidence_store.records import ReferenceRun

    record = _probe_record(3, failing=[])
    record.reference_run = ReferenceRun(not_ran=["pkg.fit"], on_interface=["pkg.fit"])
    lines = render_results([record]).splitlines()
    assert lines[1].startswith("- ESTABLISHED (against a re-implementation) forward.layers")
    assert lines[-1] == (
        "    the reference never ran pkg.fit: the probe compared against its own re-implementation; "
        "on the task's interface: pkg.fit"
    )


def test_run_probe_of_an_established_probe_is_short_too():
    text = render_results([_probe_record(120, failing=[])])
    assert "120 outputs pass; closest to their tolerance:" in text and "… 117 more passing" in text
    assert sum("<= tolerance" in line for line in text.splitlines()) == 3


def test_a_planted_copy_that_fails_as_meant_is_one_line_with_its_count():
    real = _probe_record(30, failing=list(range(28)))
    planted = real.model_copy(
        update={"property": Property(id="planted:forward.layers", kind="planted", level=1)}, deep=True
    )
    text = render_results([real, planted])
    lines = text.splitlines()
    assert lines[0] == "1 properties recorded: established=0 violated=1 not_established=0"  # the copy is not counted
    (line,) = [ln for ln in lines if "planted:forward.layers" in ln]
    assert line == (
        "- VIOLATED planted:forward.layers (planted, L1): the planted fault is caught: 28 of 30 outputs fail "
        "(listed in the evidence, not here)"
    )
    assert lines[-1] == line  # nothing of the copy below its line ...
    assert sum("> tolerance" in ln for ln in lines) == 28  # ... while the real probe still lists its 28
    crashed = planted.model_copy(update={"observations": {"message": "IndexError in the planted copy"}})
    assert render_results([crashed]).splitlines()[1].endswith("is caught: IndexError in the planted copy")
    passing = _probe_record(3, []).observations
    blind = planted.model_copy(update={"outcome": Outcome.ESTABLISHED, "observations": passing})
    assert "3 outputs pass" in render_results([blind])  # a copy that misses its fault is shown whole


FIXTURES = Path(__file__).resolve().parents[1] / "probes" / "fixtures"
FIXED = "def reference(env):\n    return {'y': 1.5}\n\n\ndef candidate(env):\n    return {'y': 1.5}\n"
BROKEN = FIXED + "\nprobe_z = reference\n"


def test_a_probe_file_that_loads_again_supersedes_its_load_error(tmp_path):
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        desk = RunProbeDesk(
            load_task(FIXTURES / "tiny"), FIXTURES / "candidates" / "good", tmp_path / "probes", store,
            run_id="r1", sandbox_kind="none", audit_log=None,
        )  # fmt: skip
        desk.round = 1
        assert desk.write_probe("shape", BROKEN) == "stored probe shape"
        shown = desk.run_probe("shape")
        assert "NOT ESTABLISHED probe:shape" in shown and "probe_z (line 8" in shown
        assert ACCEPTED_FORMS in shown  # the whole error, not only the reason line cut to fit
        assert store.latest()["probe:shape"].outcome is Outcome.NOT_ESTABLISHED
        assert "probe:shape" in store.render_for_prompt(4000, up_to_round=1)
        assert round_tally(store, 1, candidate_only=True)["not_established"] == 1

        desk.round = 2
        assert desk.write_probe("shape", FIXED) == "stored probe shape"
        shown = desk.run_probe("shape")
        assert "ESTABLISHED probe:shape (probe_file, L1): probe file shape.py loads and its probes run" in shown
        latest = store.latest()
        assert latest["shape"].outcome is Outcome.ESTABLISHED
        assert latest["probe:shape"].outcome is Outcome.ESTABLISHED
        assert latest["probe:shape"].property.kind == PROBE_FILE_KIND in NON_CANDIDATE_KINDS
        assert "supersedes the error recorded in round 1" in latest["probe:shape"].observations["message"]
        assert "probe:shape" not in store.render_for_prompt(4000, up_to_round=2)
        assert round_tally(store, 2, candidate_only=True) == {"established": 1, "violated": 0, "not_established": 0}

        before = store.count()
        desk.rerun_all()  # nothing stale any more: the superseding record is not written again
        assert [r.property.id for r in store.records()[before:] if r.property.id.startswith("probe:")] == []

        desk.write_probe("shape", BROKEN)  # broken again: the error is the latest once more
        desk.run_probe("shape")
        assert store.latest()["probe:shape"].outcome is Outcome.NOT_ESTABLISHED
        assert round_tally(store, 2, candidate_only=True)["not_established"] == 1

        assert desk.write_probe("shape", "") == "removed probe shape: it is no longer run"
        gone = store.latest()["probe:shape"]  # removed: its error leaves the candidate's properties
        assert gone.property.kind == PROBE_FILE_KIND and gone.outcome is Outcome.NOT_ESTABLISHED
        assert gone.property.description == "probe file shape.py was removed"
        assert round_tally(store, 2, candidate_only=True)["not_established"] == 0
        assert "probe:shape" not in store.render_for_prompt(4000, up_to_round=2)


def test_an_error_the_run_records_again_is_not_superseded(tmp_path, monkeypatch):
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        desk = RunProbeDesk(
            load_task(FIXTURES / "tiny"), FIXTURES / "candidates" / "good", tmp_path / "probes", store,
            run_id="r1", sandbox_kind="none", audit_log=None,
        )  # fmt: skip
        desk.write_probe("shape", BROKEN)
        desk.run_probe("shape")
        desk.write_probe("shape", FIXED)
        crashed = ProbeResult(property=Property(id="probe:shape", kind="differential", level=1),
                              outcome=Outcome.NOT_ESTABLISHED, trace="RuntimeError: probe bug")  # fmt: skip
        monkeypatch.setattr(desk, "_run", lambda probes, origin: desk._record([crashed.model_copy()]))
        desk.run_probe("shape")
        latest = store.latest()["probe:shape"]
        assert latest.outcome is Outcome.NOT_ESTABLISHED and latest.property.kind == "differential"


def test_no_probe_starts_once_the_wall_budget_is_spent_and_a_side_ends_at_it(tmp_path):
    from ground.errors import BudgetExceeded
    from harness.models.budget import Budget, BudgetTracker

    slow = "def reference(env):\n    import time\n    time.sleep(60)\n    return {'y': 1.5}\n\n\n" + (
        "def candidate(env):\n    return {'y': 1.5}\n"
    )
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        budget = BudgetTracker(Budget(max_wall_s=2.0))
        desk = RunProbeDesk(
            load_task(FIXTURES / "tiny"), FIXTURES / "candidates" / "good", tmp_path / "probes", store,
            run_id="r1", sandbox_kind="none", audit_log=None, budget=budget,
        )  # fmt: skip
        desk.round = 1
        desk.write_probe("slow", slow)
        started = time.monotonic()
        shown = desk.run_probe("slow")
        assert time.monotonic() - started < 30  # the reference's 60 s sleep was cut at the budget
        assert "NOT ESTABLISHED" in shown
        while budget.wall_left():
            time.sleep(0.2)
        with pytest.raises(BudgetExceeded, match="wall_time"):
            desk.run_probe("slow")
