"""Planted-fault copies of a probe: their own property, never counted; the desk warns of shared ids and removes probes."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence_store.records import Outcome
from evidence_store.store import EvidenceStore
from evidence_store.views import round_tally
from harness.scaffolds.twin.probe_desk import RunProbeDesk
from probes.probe_format import property_of, stated_ids
from probes.suite import PROBE_FILE_FORMAT
from task_model.loader import load_task

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOURCE = (FIXTURES / "probe_tiny.py").read_text()
PLANTED = SOURCE.replace('{"id": "forward.', '{"planted": True, "id": "forward.').replace(
    'return {"y": affine(_params(env.inputs)["a"], env.inputs["x"])}',
    'return {"y": affine(_params(env.inputs)["a"], env.inputs["x"]) + 1e-3}',
)


def test_a_planted_copy_has_its_own_property_of_its_own_kind(tmp_path):
    path = tmp_path / "p.py"
    assert property_of(path, "affine", {"id": "forward.affine"}, kind="differential", level=1) == (
        "forward.affine", "differential", 1
    )
    assert property_of(path, "affine", {"id": "forward.affine", "planted": True}, kind="differential", level=1) == (
        "planted:forward.affine", "planted", 1
    )
    assert property_of(path, "", {}, kind="differential", level=1)[0] == "p"
    (tmp_path / "planted.py").write_text(PLANTED)
    assert "planted:forward.affine" in stated_ids(tmp_path / "planted.py")
    assert "forward.affine" not in stated_ids(tmp_path / "planted.py")


@pytest.mark.heavy  # the desk runs the probe on the candidate and on the planted copy (about 30 s)
def test_the_desk_records_a_planted_copy_apart_and_no_tally_counts_it(tmp_path):
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        desk = RunProbeDesk(
            load_task(FIXTURES / "tiny"), FIXTURES / "candidates" / "good", tmp_path / "probes", store,
            run_id="r1", sandbox_kind="none", audit_log=None,
        )
        desk.round = 1
        assert desk.write_probe("tiny", SOURCE) == "stored probe tiny"
        desk.run_probe("tiny")
        shown = desk.write_probe("tiny_planted", PLANTED)
        assert "warning" not in shown  # the planted copy states its own property
        result = desk.run_probe("tiny_planted")
        assert "planted:forward.affine" in result
        latest = store.latest(up_to_round=1)
        assert latest["forward.affine"].outcome is Outcome.ESTABLISHED
        assert latest["planted:forward.affine"].outcome is Outcome.VIOLATED
        assert round_tally(store, 1, candidate_only=True)["violated"] == 0
        assert "planted:forward.affine" not in store.render_for_prompt(4000, up_to_round=1)
        assert desk.localize().outcome is not Outcome.VIOLATED  # nothing of the candidate diverges

        # an unmarked copy shares the real ids: the desk says so
        warned = desk.write_probe("tiny_copy", SOURCE)
        assert warned.startswith("stored probe tiny_copy\nwarning: probe tiny states ") and "forward.affine" in warned
        assert desk.write_probe("tiny_copy", "") == "removed probe tiny_copy: it is no longer run"
        assert not (tmp_path / "probes" / "tiny_copy.py").exists()
        assert desk.write_probe("tiny_copy", " \n") == "no stored probe named tiny_copy: nothing removed"


def test_the_format_the_verifier_reads_leaves_out_what_is_for_people_at_a_shell():
    readme = (Path(__file__).resolve().parents[2] / "probes" / "README.md").read_text()
    assert "twin probe --task DIR" in readme and "<!-- people -->" in readme
    assert "twin probe" not in PROBE_FILE_FORMAT and "<!--" not in PROBE_FILE_FORMAT
    assert '"planted": True' in PROBE_FILE_FORMAT and "eval mode" in PROBE_FILE_FORMAT
