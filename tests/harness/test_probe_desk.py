"""The Verifier's probe desk: what run_probe returns, and how a probe file's own errors are superseded."""

from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome, Property
from harness.scaffolds.twin.probe_desk import render_results


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


def test_run_probe_of_an_established_probe_is_short_too():
    text = render_results([_probe_record(120, failing=[])])
    assert "120 outputs pass; closest to their tolerance:" in text and "… 117 more passing" in text
    assert sum("<= tolerance" in line for line in text.splitlines()) == 3
