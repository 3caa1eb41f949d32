"""A run's figures are one figure each: state.json, summary.md and the last line of `twin migrate` agree.

Whole runs on the tiny-calc fixture through the CLI, driven by scripted replies (not a
model's work). The grader is a stand-in that takes a set time, so that grading, which
comes after the rounds, would show in the wall time if the figure leaked it.
"""

from __future__ import annotations

import io
import json
import re
import time
from collections import Counter

import pytest
from rich.console import Console

from benchmark_adapter.grading.grader import Grade
from harness.cli.app import main
from harness.run import figures, finish
from harness.run.directory import RunDir, RunState
from harness.run.progress import Progress, RunView
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(
    __import__("shutil").which("bwrap") is None, reason="the loop's tests run the real bwrap sandbox"
)

GRADING_S = 0.6


def slow_grader(task, candidate, **kwargs):
    time.sleep(GRADING_S)
    return Grade(task=task.name, candidate=str(candidate), reward=1.0, returncode=0, duration_s=GRADING_S,
                 sandbox="bwrap")  # fmt: skip


def migrate(tmp_path, capsys, monkeypatch, replies, *options: str) -> tuple[RunDir, list[str], str]:
    """Run `twin migrate` on tiny-calc; the run, its stdout lines and its stderr."""
    monkeypatch.setattr(finish, "run_grader", slow_grader)
    model = plans.write_script(tmp_path / "script.json", replies)
    runs = tmp_path / "runs"
    args = ["--task", str(plans.TINY_TASK), "--model", model, "--runs-dir", str(runs), "--run-id", "r"]
    assert main(["migrate", *args, "--rounds", "2", "--skip-task-check", *options]) == 0
    out, err = capsys.readouterr()
    return RunDir(runs / "r"), out.splitlines(), err


def calls_in_trajectory(run: RunDir) -> Counter:
    """Model calls per round as the trajectory records them, one record per call."""
    records = [json.loads(line) for line in run.trajectory.read_text().splitlines()]
    return Counter(r["round"] for r in records if r["type"] == "model_call")


def summary_rows(summary: str) -> dict[int, list[str]]:
    rows = [line.strip("|").split("|") for line in summary.splitlines() if re.match(r"\| \d+ \|", line)]
    return {int(cells[0]): [c.strip() for c in cells[1:]] for cells in rows}


def test_wall_time_and_calls_per_round_are_one_figure_in_state_summary_and_last_line(tmp_path, capsys, monkeypatch):
    run, out, err = migrate(tmp_path, capsys, monkeypatch, plans.twin_fix_in_round_two())
    state = run.load_state()
    summary = run.summary.read_text()
    last = out[-1]

    per_round = calls_in_trajectory(run)
    assert per_round == {1: 6, 2: 4}  # the script: diagnose 1 + migrate 3 + verify 2, then 1 + 2 + 1
    # state.json: each round's own calls, the running total named as such
    assert [(r.round, r.model_calls, r.model_calls_total) for r in state.rounds] == [(1, 6, 6), (2, 4, 10)]
    assert state.spent.calls == 10 and sum(r.tokens for r in state.rounds) == state.spent.tokens

    wall = f"wall time {figures.seconds(state.spent.wall_s)} (the rounds)"
    assert last.startswith("spent: 10 model calls (round 1: 6, round 2: 4), ") and wall in last
    assert f"- spent: {last.removeprefix('spent: ')}" in summary.splitlines()  # the very same text
    rows = summary_rows(summary)
    assert {r: cells[1] for r, cells in rows.items()} == {1: "6", 2: "4"}  # the "model calls" column

    # grading came after the rounds: shown beside the wall time, never inside it
    assert state.grading_s is not None and state.grading_s >= 2 * GRADING_S
    assert f"grading {figures.seconds(state.grading_s)} more" in last
    assert json.loads(run.state_path.read_text())["spent"]["wall_s"] == state.spent.wall_s
    assert "established=" in err  # the twin loop's live line carries its evidence counters


def test_the_base_scaffold_shows_no_evidence_counters(tmp_path, capsys, monkeypatch):
    run, out, err = migrate(tmp_path, capsys, monkeypatch, plans.base_two_rounds(), "--scaffold", "base", "--no-grade")
    summary = run.summary.read_text()
    live = [line for line in err.splitlines() if line.startswith("r ") and "tokens=" in line]
    assert live, err  # the live line is there ...
    assert not any(re.search(r"established|violated", line) for line in live)  # ... without counters
    assert not re.search(r"established|violated", summary)
    header = next(line for line in summary.splitlines() if line.startswith("| round"))
    assert header == "| round | commit | model calls | tokens | reward |"
    assert {r: cells[1] for r, cells in summary_rows(summary).items()} == {1: "4", 2: "3"}
    state = run.load_state()
    assert state.grading_s is None and "grading" not in out[-1]
    assert f"wall time {figures.seconds(state.spent.wall_s)} (the rounds)" in out[-1]


def test_a_version_1_state_reads_its_running_totals_as_totals():
    old = {
        "schema_version": 1,
        "run_id": "r",
        "rounds": [
            {"round": 2, "done": ["diagnose"], "model_calls": 11},
            {"round": 1, "done": ["verify"], "model_calls": 9},
        ],
    }
    state = RunState.model_validate(old)
    assert [(r.round, r.model_calls, r.model_calls_total) for r in state.rounds] == [(1, 9, 9), (2, 2, 11)]
    assert state.schema_version == 2 and state.model_calls_total == 11


def test_a_round_is_charged_only_what_was_spent_since_the_round_before():
    state = RunState(run_id="r")
    state.round_state(1)
    state.spent.calls, state.spent.tokens_in = 6, 600
    state.account(1)
    state.round_state(2)
    state.spent.calls, state.spent.tokens_in = 8, 750
    state.account(2)
    state.spent.calls, state.spent.tokens_in = 10, 900
    state.account(2)  # a later save of the same round
    state.account(3)  # a round not begun: nothing
    assert [(r.model_calls, r.tokens, r.model_calls_total, r.tokens_total) for r in state.rounds] == [
        (6, 600, 6, 600),
        (4, 300, 10, 900),
    ]
    assert figures.calls_per_round(state) == "round 1: 6, round 2: 4"


@pytest.mark.parametrize(("scaffold", "counters"), [("twin", True), ("base", False), ("mini-swe-agent", False)])
def test_the_live_view_carries_evidence_counters_only_for_a_scaffold_with_evidence(scaffold, counters):
    out = io.StringIO()
    with Progress(RunView("r", scaffold, "scripted", 2), Console(file=out, width=200), live=False) as progress:
        progress.role(1, "agent")
    panel = io.StringIO()
    Console(file=panel, width=200).print(Progress(RunView("r", scaffold, "scripted", 2), live=False)._render())
    assert ("established=0" in out.getvalue()) is counters and "tokens=0" in out.getvalue()
    assert ("evidence" in panel.getvalue()) is counters and "tokens · cost" in panel.getvalue()
