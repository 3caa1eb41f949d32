"""A run's figures, each defined once and written once: wall time, model calls, tokens, dollars.

`state.json` holds them (`RunState.spent` for the run, `rounds[]` for each round, with the
running totals named as such) and everything that shows them renders them from there with
the functions below: `summary.md`, the closing lines of `twin migrate` and the bench's trial
results read the same state. What the wall time covers is said once, in docs/loop.md
("Figures"): the rounds, from the budget's start to the end of the last round, resumed
sessions added up; the task check before the run and grading after it are not in it
(grading's own time is shown beside it).

Which columns a scaffold's views carry is decided here too: only a scaffold that keeps an
evidence store (`EVIDENCE_SCAFFOLDS`) shows evidence counters.
"""

from __future__ import annotations

from harness.run.directory import RunState

EVIDENCE_SCAFFOLDS = frozenset({"twin"})
"""Scaffolds that keep an evidence store; the others (base, mini-swe-agent) have no evidence counters to show."""


def shows_evidence(scaffold: str) -> bool:
    """Whether a scaffold's live line and summary carry evidence counters."""
    return scaffold in EVIDENCE_SCAFFOLDS


def seconds(value: float) -> str:
    """A duration as every view writes it: tenths of a second."""
    return f"{value:.1f} s"


def calls_per_round(state: RunState) -> str:
    """Each round's own model calls: `round 1: 6, round 2: 5` ("" before any round)."""
    return ", ".join(f"round {r.round}: {r.model_calls}" for r in sorted(state.rounds, key=lambda r: r.round))


def wall_text(state: RunState) -> str:
    """The run's wall time, with what it covers, and grading's time beside it when the run was graded."""
    text = f"wall time {seconds(state.spent.wall_s)} (the rounds)"
    if state.grading_s is not None:
        text += f", grading {seconds(state.grading_s)} more"
    return text


def spent_line(state: RunState) -> str:
    """What the run spent, in one line: the same text in summary.md and at the end of `twin migrate`."""
    spent = state.spent
    per_round = calls_per_round(state)
    calls = f"{spent.calls} model calls" + (f" ({per_round})" if per_round else "")
    return f"{calls}, {spent.tokens_text()}, ${spent.usd:.4f}, {wall_text(state)}"
