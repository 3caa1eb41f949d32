"""The final round's rule and every round's eligibility, on states with known rounds."""

from __future__ import annotations

import pytest

from harness.run.directory import RoundState, RunState
from harness.run.final_choice import choice, explain, settle


def twin_state_cut_in_round_two(kind: str = "wall_time") -> RunState:
    """Round 1 verified (score 24); round 2 committed, then cut by a budget during its Verifier."""
    return RunState(
        run_id="r",
        stop_reason=f"budget: {kind} budget exhausted: used 5625 of 5400",
        rounds=[
            RoundState(round=1, done=["diagnose", "migrate", "verify"], commit="a" * 40, evidence_score=24),
            RoundState(round=2, done=["diagnose", "migrate"], commit="b" * 40),
        ],
    )


def test_a_round_cut_during_the_verifier_is_named_not_eligible():
    state = twin_state_cut_in_round_two()
    settle(state, 3)
    assert state.final_round == 1
    assert "round 1 by the rule 'best-evidence'" in state.final_choice
    assert "round 1: verified, evidence score 24: eligible" in state.final_choice
    assert "round 2: cut by the wall-time budget during the Verifier: not eligible" in state.final_choice


@pytest.mark.parametrize(("kind", "words"), [("tokens", "token"), ("calls", "model-call"), ("dollars", "dollar")])
def test_the_budget_that_cut_the_round_is_named(kind, words):
    assert f"cut by the {words} budget during the Verifier" in explain(twin_state_cut_in_round_two(kind), 3)


def test_last_complete_prefers_the_latest_complete_round_over_a_better_score():
    state = twin_state_cut_in_round_two()
    state.rounds.append(RoundState(round=3, done=["diagnose", "migrate", "verify"], commit="c" * 40, evidence_score=3))
    state.stop_reason = "all 3 rounds done"
    assert choice(state, 3, "best-evidence") == 1
    assert choice(state, 3, "last-complete") == 3
    text = explain(state, 3, "last-complete")
    assert text.startswith("round 3 by the rule 'last-complete'")
    assert "round 2: cut during the Verifier (all 3 rounds done): not eligible" in text


def test_a_cut_during_the_migrator_and_the_diagnoser_name_their_step():
    state = RunState(
        run_id="r",
        stop_reason="budget: tokens budget exhausted: used 10 of 9",
        rounds=[
            RoundState(round=1, done=["diagnose"], commit="a" * 40, note="stopped by budget during migration"),
            RoundState(round=2, done=[]),
        ],
    )
    text = explain(state, 2)
    assert "round 1: cut by the token budget during the Migrator: not eligible" in text
    assert "round 2: cut by the token budget during the Diagnoser, nothing committed: not eligible" in text
    assert choice(state, 2) == 1  # no verified round: the latest committed one


def test_a_single_agents_cut_round_names_the_agents_run():
    state = RunState(
        run_id="r",
        stop_reason="budget: calls budget exhausted: used 4 of 4",
        rounds=[
            RoundState(round=1, done=["migrate"], commit="a" * 40),
            RoundState(round=2, done=[], commit="b" * 40, note="stopped by budget"),
        ],
    )
    text = explain(state, 2, "last-complete")
    assert choice(state, 2, "last-complete") == 1
    assert "round 2: cut by the model-call budget during the agent's run: not eligible" in text
    assert choice(state, 2, "best-evidence") == 2  # nothing verified: the latest committed


def test_no_round_committed_chooses_none():
    state = RunState(run_id="r", rounds=[RoundState(round=1)])
    assert choice(state, 1) is None
    assert explain(state, 1).startswith("no round by the rule")


@pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="the loop runs the real bwrap sandbox")
def test_a_run_whose_last_round_was_cut_says_why_in_its_summary(tmp_path):
    from harness.run.migration import run_migration
    from harness.run.session import RunInputs
    from harness.scaffolds.registry import SCAFFOLDS
    from tests.harness import loop_scripts as plans
    from tests.harness.test_loop import start

    # 9 calls: round 1 whole (6), round 2's Diagnoser and Migrator (3); its Verifier's first call is refused
    run = start(tmp_path, plans.twin_fix_in_round_two(), budget={"max_calls": 9}, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert state.final_round == 2  # its repair is shown by the re-run of round 1's probes, with no Verifier
    summary = " ".join(run.summary.read_text().split())
    assert (
        "round 2: cut by the model-call budget during the Verifier, verified by the re-run of the built-in checks "
        "and every probe only, evidence score" in summary
    )
    assert "round 1: verified, evidence score" in summary and "rule 'best-evidence'" in summary


def test_the_final_round_option_is_checked(tmp_path, capsys):
    from harness.cli.app import main
    from tests.harness.loop_scripts import TINY_TASK

    args = ["migrate", "--task", str(TINY_TASK), "--model", "scripted:x.json", "--final-round", "newest"]
    code = main([*args, "--runs-dir", str(tmp_path / "runs")])
    assert code == 2
    assert "final_rule" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
