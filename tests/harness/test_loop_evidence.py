"""The evidence a role reads is fenced as data, and the fence never cuts what the renderer kept."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.scaffolds.twin.loop import TwinLoop
from harness.scaffolds.twin.objectives import property_id_in
from roles.fence import fence_agent_text


def test_a_large_evidence_budget_is_never_cut_by_the_fence():
    loop = SimpleNamespace(s=SimpleNamespace(config=SimpleNamespace(evidence_chars=50_000)))
    limit = TwinLoop.evidence_limit.fget(loop)
    rendered = "- violated forward.logits (differential, L1)\n" * 1000  # 45,000 characters, whole records
    fenced = fence_agent_text("evidence", rendered, limit=limit)
    assert "(cut:" not in fenced and rendered.strip() in fenced
    assert "(cut:" in fence_agent_text("evidence", rendered)  # the default limit would have cut it


def test_an_objective_whose_probe_id_is_established_shows_done(tmp_path):
    """In round 1 no property exists yet: the id a gap asks a new probe to carry is what marks it done."""
    from evidence_store.records import EvidenceRecord, Outcome, Property
    from evidence_store.store import EvidenceStore
    from evidence_store.views import candidate_latest
    from roles.schemas import Diagnosis, Gap

    diagnosis = Diagnosis(
        summary="nothing migrated",
        gaps=[
            Gap(title="gelu", objective="use the exact GELU", probes=["forward.block.gelu"]),
            Gap(title="described", objective="same", evidence=["forward.block.gelu — exact, not tanh"]),
            Gap(title="data", objective="port the loader", probes=["a check of the batches"]),
        ],
    )
    with EvidenceStore(tmp_path / "e.sqlite") as store:
        store.record_diagnosis("r", 1, diagnosis)
        store.append_many(
            [
                EvidenceRecord(
                    run_id="r",
                    round=1,
                    outcome=Outcome.ESTABLISHED,
                    property=Property(id="forward.block.gelu", kind="differential", level=1),
                )
            ]
        )
        loop = SimpleNamespace(
            store=store,
            candidate_latest=lambda t: candidate_latest(store.latest(up_to_round=t)),
            diagnosis=lambda t: Diagnosis.model_validate(store.diagnoses(round=t)[-1].diagnosis),
        )
        marked = dict(TwinLoop.objectives_status(loop, 1))
    assert marked["gelu"] == "done"  # a done objective by its title alone
    assert marked["described"] == "done"
    assert marked["data: port the loader"].startswith("open: it names no property")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("checkpoint.load_params", "checkpoint.load_params"),
        ("checkpoint.load_params — maps all tensors", "checkpoint.load_params"),
        ("checkpoint.load_params: maps all tensors", "checkpoint.load_params"),
        ("  checkpoint.load_params (all tensors)", "checkpoint.load_params"),
        ("checkpoint.load_params_strict", None),  # a longer id is another property
        ("checkpoint.load", "checkpoint.load"),
        ("checkpoint.load — the loader", "checkpoint.load"),
        ("a check of the batches", None),
    ],
)
def test_an_objective_names_a_property_by_its_id_even_with_a_description_after_it(entry, expected):
    known = {"checkpoint.load_params": 1, "checkpoint.load": 2}
    assert property_id_in(entry, known) == expected


@pytest.mark.parametrize(
    ("gaps", "shown"),
    [
        ([{"evidence": ["forward.logits"], "probes": ["loss.ce — the loss"]}], True),
        ([{"evidence": ["forward.logits"]}, {"probes": ["loss.ce"]}], True),
        ([{"evidence": ["forward.logits"], "probes": ["forward.block (new)"]}], False),  # no probe states it yet
        ([{"evidence": ["forward.logits"], "probes": ["re-run the model probes"]}], False),  # words, not an id
        ([{"evidence": ["model.py:12"]}], False),
        ([{"evidence": ["forward.logits", "checkpoint.load"]}], False),  # one named property is violated
        ([{"evidence": []}], False),  # a gap that names nothing
        ([], False),  # no gap: nothing asked, and nothing shown
    ],
)
def test_a_diagnosis_is_shown_by_the_rerun_only_when_every_entry_names_an_established_property(gaps, shown):
    from evidence_store.records import Outcome
    from harness.scaffolds.twin.objectives import all_shown
    from roles.schemas import Diagnosis, Gap

    def latest(outcome):
        return SimpleNamespace(outcome=outcome, open_on_interface=[])

    known = {
        "forward.logits": latest(Outcome.ESTABLISHED),
        "loss.ce": latest(Outcome.ESTABLISHED),
        "checkpoint.load": latest(Outcome.VIOLATED),
    }
    diagnosis = Diagnosis(summary="s", gaps=[Gap(title="t", objective="o", **gap) for gap in gaps])
    assert all_shown(diagnosis, known) is shown
