"""The loop records a localization after each Verifier pass and shows it to the next Diagnoser.

Scripted models drive the runs (labelled 'scripted'); they test the loop's mechanics.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidence_store.store import EvidenceStore
from ground.trajectory import Trajectory
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the loop's tests run the real bwrap sandbox")

REPO = Path(__file__).resolve().parents[2]
SPLIT_PROBE = """PROBES = {
    "add": {"id": "calc.add", "level": 1, "component": "calc.ops.add"},
    "scale": {"id": "calc.scale", "level": 1, "component": "calc.ops.scale"},
}


def inputs_add(env):
    return {"x": env.rng.normal(size=(5,)), "k": 3.0}


def inputs_scale(env):
    return {"x": env.rng.normal(size=(5,)), "k": 3.0}


def reference_add(env):
    from calc import ops
    return {"sum": ops.add(env.inputs["x"], env.inputs["x"])}


def candidate_add(env):
    from calc import ops
    return {"sum": ops.add(env.inputs["x"], env.inputs["x"])}


def reference_scale(env):
    from calc import ops
    return {"scaled": ops.scale(env.inputs["x"], env.inputs["k"])}


def candidate_scale(env):
    from calc import ops
    return {"scaled": ops.scale(env.inputs["x"], env.inputs["k"])}
"""


def diagnoser_prompts(run: RunDir) -> dict[int, str]:
    calls = Trajectory(run.trajectory).model_calls()
    return {
        c.round: "\n".join(str(m.get("content") or "") for m in c.request.messages if m["role"] == "user")
        for c in calls
        if c.role == "diagnoser"
    }


def localizations(run: RunDir):
    store = EvidenceStore(run.evidence, create=False)
    try:
        return store.records(property_id="localization")
    finally:
        store.close()


def test_round_two_diagnoser_sees_round_one_localization(tmp_path):
    replies = plans.twin_fix_in_round_two()
    replies[4] = plans.call("write_probe", name="calc_ops", source=SPLIT_PROBE)
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, rounds=2, grade=False)
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    first, second = localizations(run)
    assert (first.round, first.outcome.value, first.observations["component"]) == (1, "violated", "calc.ops.scale")
    assert first.observations["probes"] == ["calc.scale"] and first.observations["change"] == "first"
    assert (second.round, second.outcome.value, second.observations["change"]) == (2, "established", "resolved")
    prompts = diagnoser_prompts(run)
    assert "Localization" not in prompts[1]
    assert "Localization after round 1: the divergence starts at calc.ops.scale" in prompts[2]
    assert prompts[2].index("Localization after round 1") < prompts[2].index("calc.add")
    state = run.load_state()
    # the localization is a view of the evidence, not a property of the candidate: it does not count twice
    assert state.rounds[1].evidence_score == 2 + 5  # calc.add, calc.scale + the built-in checks


@pytest.mark.slow
def test_mlp_train_round_two_diagnoser_names_the_defective_converter(tmp_path):
    """The bundled mlp-train demonstration's replies, re-run as a script (its defect: the converter)."""
    recording = REPO / "examples" / "mlp-train" / "twin.jsonl"
    replies = [
        {"content": c.reply.content, "tool_calls": [t.model_dump() for t in c.reply.tool_calls]}
        for c in Trajectory(recording).model_calls()
    ]
    (tmp_path / "script.json").write_text(json.dumps(replies))
    config = RunConfig.build(
        task=REPO / "tasks" / "t2j-mini" / "mlp-train",
        model=f"scripted:{tmp_path / 'script.json'}",
        rounds=2,
        grade=False,
    )
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    first = localizations(run)[0]
    assert first.round == 1 and first.observations["component"] == "mlp_train.checkpoint.load_checkpoint"
    assert f"the divergence starts at {first.observations['component']}" in diagnoser_prompts(run)[2]


def test_a_localization_that_turns_violated_is_no_regression_of_the_candidate(tmp_path):
    from types import SimpleNamespace

    from evidence_store.records import EvidenceRecord, Outcome, Property
    from harness.scaffolds.twin.loop import TwinLoop

    def record(pid: str, kind: str, outcome: str, round: int) -> EvidenceRecord:
        return EvidenceRecord(
            run_id="r", round=round, outcome=Outcome(outcome), property=Property(id=pid, kind=kind, level=1)
        )

    with EvidenceStore(tmp_path / "e.sqlite") as store:
        store.append_many(
            [
                record("localization", "localization", "established", 1),
                record("calc.add", "differential", "established", 1),
            ]
        )
        store.append_many(
            [record("localization", "localization", "violated", 2), record("calc.add", "differential", "violated", 2)]
        )
        loop = SimpleNamespace(store=store)
        assert TwinLoop.regressions(loop, 2) == ["calc.add"]  # the candidate's own regression only
