"""`twin evidence show` opens with the latest localization of the rounds shown."""

from __future__ import annotations

from pathlib import Path

from evidence_store.records import EvidenceRecord, Outcome, ProbeResult, Property
from evidence_store.store import STORE_FILENAME, EvidenceStore
from harness.cli.app import main
from probes.round_localization import localize_round

TINY = Path(__file__).resolve().parents[1] / "probes" / "fixtures" / "tiny"


def _result(pid: str, outcome: Outcome, component: str) -> ProbeResult:
    return ProbeResult(
        property=Property(id=pid, kind="differential", level=1), outcome=outcome, context={"component": component}
    )


def test_evidence_show_prints_the_localization_of_the_round(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    source = TINY / "environment" / "source"
    round1 = [_result("affine", Outcome.VIOLATED, "model.Affine"), _result("net", Outcome.VIOLATED, "model.Net")]
    round2 = [_result("affine", Outcome.ESTABLISHED, "model.Affine"), _result("net", Outcome.ESTABLISHED, "model.Net")]
    first = localize_round(source, round1, round=1)
    second = localize_round(source, round2, round=2, previous=first)
    path = tmp_path / "runs" / "r1"
    path.mkdir(parents=True)
    with EvidenceStore(path / STORE_FILENAME) as store:
        for t, results in ((1, [*round1, first]), (2, [*round2, second])):
            store.append_many([EvidenceRecord.from_result(r, run_id="r1", round=t) for r in results])
    assert main(["evidence", "show", "r1", "--round", "1"]) == 0
    out = capsys.readouterr().out
    assert "Localization after round 1: the divergence starts at model.Affine of the original" in out
    assert main(["evidence", "show", "r1"]) == 0
    out = capsys.readouterr().out
    assert "Localization after round 2: no divergent component" in out
    assert "model.Affine no longer diverges" in out
