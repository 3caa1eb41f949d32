"""The base scaffold stops once its agent submits, unless it has something new to say: never a bare "continue"."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.run.directory import RunConfig, RunDir, RunState
from roles import prompting
from tests.harness import loop_scripts as plans

BARE = "Continue working on the task"


def test_a_later_rounds_message_says_what_is_new_and_never_just_continue():
    failing = prompting.render(
        "base_task", round=2, instruction="Port it.", candidate_dir="/app", step_limit=0, failing=["imports: x"]
    )
    assert "twin's candidate-side checks" in failing and "the original's framework is absent" in failing
    assert "```" in failing and "imports: x" in failing  # the checks' words are fenced as data
    assert "model calls before you called `submit`" not in failing
    limit = prompting.render(
        "base_task", round=2, instruction="Port it.", candidate_dir="/app", step_limit=7, failing=[]
    )
    assert "used all its 7 model calls before you called `submit`" in limit and "candidate-side" not in limit
    for text in (failing, limit):
        assert BARE not in text
    first = prompting.render(
        "base_task", round=1, instruction="Port it.", candidate_dir="/app", step_limit=0, failing=[]
    )
    assert "Round" not in first


bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs the real bwrap sandbox")


def run_base(tmp_path, replies, **settings) -> RunDir:
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS

    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, scaffold="base", **{"rounds": 3, **settings})
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    return run


def user_messages(run: RunDir) -> list[str]:
    """The task message of every round (the first user message of each call that starts a conversation)."""
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    return [c["request"]["messages"][1]["content"] for c in calls if len(c["request"]["messages"]) == 2]


@bwrap
def test_an_agent_that_submitted_with_nothing_failing_is_not_asked_again(tmp_path):
    run = run_base(tmp_path, plans.base_submits_once(), grade=False)
    state = run.load_state()
    assert [r.round for r in state.rounds] == [1]
    assert state.stop_reason == "round 1: the agent submitted and twin's candidate-side checks found nothing violated"
    assert state.spent.calls == 3  # the reply after the submit was never asked for
    assert state.rounds[0].agent_submitted is True
    assert all(BARE not in m for m in user_messages(run))


@bwrap
def test_after_a_submit_a_failing_check_is_what_the_next_round_is_told(tmp_path):
    run = run_base(tmp_path, plans.base_two_rounds(), base_steps=4)
    state = run.load_state()
    assert [r.round for r in state.rounds] == [1, 2]  # round 2 fixed it: no round 3 for 3 rounds allowed
    assert state.stop_reason.startswith("round 2: the agent submitted")
    first, second = user_messages(run)
    assert "Round" not in first
    assert "found these properties violated" in second and "calc.legacy" in second and BARE not in second
    assert [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]] == [0.5, 1.0]


@bwrap
def test_a_round_that_ran_out_of_steps_says_so_to_the_next(tmp_path):
    run = run_base(tmp_path, plans.base_two_rounds(), base_steps=2, rounds=2, grade=False)
    state = run.load_state()
    assert [r.agent_submitted for r in state.rounds] == [False, True]
    assert state.rounds[0].note == "no submit within 2 model calls"
    second = user_messages(run)[1]
    assert "used all its 2 model calls before you called `submit`" in second and BARE not in second
