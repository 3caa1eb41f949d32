"""A budget is spent as a team would: a Migrator that never submits is stopped at its share, and the
Verifier still runs and its probes are recorded (tokens, then wall time).

The models here are scripted (labelled 'scripted' in every record): they test the loop's mechanics,
not a model's work.
"""

from __future__ import annotations

import itertools
import json

import pytest

from evidence_store.store import EvidenceStore
from ground.model import ModelReply, ToolCall, Usage
from harness.models import factory
from harness.models.budget_plan import BudgetShares
from harness.run.directory import RunConfig
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

NOTICE = "you have used your share of this round"


def model_calls(run) -> list[dict]:
    return [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]


def probe_outcomes(run) -> list[tuple[int, str]]:
    with EvidenceStore(run.evidence, create=False) as store:
        return [(r.round, r.outcome.value) for r in store.records(property_id="calc.ops")]


def test_a_migrator_that_never_submits_is_stopped_at_its_token_share_and_the_verifier_runs(tmp_path):
    # 120 tokens a call; 2,000 in all: the Migrator's share is 55% (1,100), reached after its 10th call;
    # told then, its 11th reply does not submit either, so twin submits for it.
    migrator = [plans.call("write_file", path="/app/calc/__init__.py", content=plans.INIT),
                plans.call("write_file", path="/app/calc/ops.py", content=plans.OPS_GOOD),
                *[plans.call("bash", command="ls /app") for _ in range(9)]]  # fmt: skip
    replies = [plans.diagnose(), *migrator, *plans.verify_with_new_probe()]
    script = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(
        task=plans.TINY_TASK, model=script, rounds=1, sandbox="none", grade=False, budget={"max_tokens": 2000}
    )
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    state = inputs.run.load_state()
    calls = model_calls(inputs.run)
    assert all(c["label"] == "scripted" for c in calls)
    for role in ("diagnoser", "migrator", "verifier"):  # every role's task message shows its budget
        task = next(c for c in calls if c["role"] == role)["request"]["messages"][1]["content"]
        assert "# Budget\nThe run has left: " in task and "Your share of this round" in task, role
    first_migrator = next(c for c in calls if c["role"] == "migrator")["request"]["messages"][1]["content"]
    assert "The run has left: 1,880 tokens." in first_migrator  # 2,000 less the Diagnoser's one call
    assert "Your share of this round (55% of what was left when it started): 1,100 tokens." in first_migrator
    roles = [c["role"] for c in calls]
    assert roles == ["diagnoser"] + ["migrator"] * 11 + ["verifier"] * 2
    told = [c for c in calls if any(NOTICE in str(m.get("content")) for m in c["request"]["messages"])]
    assert [c["role"] for c in told] == ["migrator"]  # told once: its 11th call is the only one that read it
    assert state.rounds[0].done == ["diagnose", "migrate", "verify"]
    assert "twin submitted for the Migrator at its budget share" in state.rounds[0].note
    assert probe_outcomes(inputs.run) == [(1, "established")]
    assert state.rounds[0].evidence_score is not None and state.final_round == 1
    plan = state.rounds[0].budget_plan
    assert plan.left.tokens == 2000 and plan.shares["migrator"].tokens == pytest.approx(1100)
    assert json.loads(inputs.run.config_path.read_text())["budget_shares"]["migrator"] == 0.55


class ByRole:
    """A scripted model that answers by role (labelled 'scripted'): the Diagnoser submits, the Migrator
    writes the candidate then sleeps forever, the Verifier writes a probe and submits."""

    name = label = "scripted"

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.migrator = iter(
            [plans.call("write_file", path="/app/calc/__init__.py", content=plans.INIT),
             plans.call("write_file", path="/app/calc/ops.py", content=plans.OPS_GOOD)]
        )  # fmt: skip
        self.verifier = iter(plans.verify_with_new_probe())

    def query(self, messages, tools=None, *, role="agent") -> ModelReply:
        if role == "diagnoser":
            entry = plans.diagnose()
        elif role == "migrator":
            entry = next(self.migrator, plans.call("bash", command="sleep 1"))
        else:
            entry = next(self.verifier)
        (call,) = entry["tool_calls"]
        reply = ModelReply(
            tool_calls=[ToolCall(id=f"c{next(self.ids)}", name=call["name"], arguments=call["arguments"])],
            usage=Usage(prompt_tokens=10, completion_tokens=1),
        )
        return reply


@pytest.mark.heavy  # spends a few seconds of wall budget on purpose
def test_a_migrator_that_never_submits_is_stopped_at_its_wall_share_and_the_verifier_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(factory.MODEL_KINDS, "scripted", lambda argument, options: ByRole())
    config = RunConfig.build(
        task=plans.TINY_TASK, model="scripted:by-role", rounds=1, sandbox="none", grade=False,
        budget={"max_wall_s": 12.0}, budget_shares=BudgetShares(diagnoser=0.1, migrator=0.4, reserve=0.1),
    )  # fmt: skip
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    state = inputs.run.load_state()
    assert state.rounds[0].done == ["diagnose", "migrate", "verify"], state.stop_reason
    assert "twin submitted for the Migrator at its budget share" in state.rounds[0].note
    assert probe_outcomes(inputs.run) == [(1, "established")]
    assert state.spent.wall_s < 12.0
    migrator_share = state.rounds[0].budget_plan.shares["migrator"].wall_s
    assert 4.0 < migrator_share <= 4.8
    roles = [c["role"] for c in model_calls(inputs.run)]
    assert roles.count("verifier") == 2 and all(c["label"] == "scripted" for c in model_calls(inputs.run))


def test_the_single_agent_sees_what_the_run_has_left(tmp_path):
    replies = plans.migrate(plans.OPS_GOOD)
    script = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=script, scaffold="base", rounds=1, sandbox="none",
                             grade=False, budget={"max_tokens": 5000, "max_wall_s": 600.0})  # fmt: skip
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    task = model_calls(inputs.run)[0]["request"]["messages"][1]["content"]
    assert "# Budget\nThe run has left: 5,000 tokens, " in task and " s of wall time." in task
    assert "at most 150 model calls" in task
    assert "Your share" not in task  # one agent: the whole of what is left is its own


def test_a_round_the_run_budget_stopped_in_migration_is_still_verified_by_the_re_run(tmp_path):
    # The Migrator's share (90%) is beyond what the run has: the run's token budget stops it mid-round.
    migrator = [plans.call("write_file", path="/app/calc/__init__.py", content=plans.INIT),
                plans.call("write_file", path="/app/calc/ops.py", content=plans.OPS_GOOD),
                *[plans.call("bash", command="ls /app") for _ in range(6)]]  # fmt: skip
    script = plans.write_script(tmp_path / "script.json", [plans.diagnose(), *migrator])
    config = RunConfig.build(
        task=plans.TINY_TASK, model=script, rounds=1, sandbox="none", grade=False, budget={"max_tokens": 1000},
        budget_shares={"diagnoser": 0.05, "migrator": 0.9, "reserve": 0.01},
    )  # fmt: skip
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    state = inputs.run.load_state()
    assert state.stop_reason.startswith("budget: tokens"), state.stop_reason
    (round1,) = state.rounds
    assert round1.commit and round1.evidence_score is not None
    assert "verified by the re-run of the built-in checks and every probe only (no Verifier)" in round1.note
    with EvidenceStore(inputs.run.evidence, create=False) as store:
        assert any(r.context.get("origin") == "builtin" for r in store.records(round=1))
    assert state.final_round == 1 and "best evidence score" in state.final_choice
