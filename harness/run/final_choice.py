"""Which round's candidate a run delivers, by which rule, and why each round was or was not eligible.

Two rules, chosen with `RunConfig.final_rule` (`twin migrate --final-round`):

- `best-evidence` (the default): the verified round with the best evidence score
  (established − violated), ties going to the latest; without any verified round, the
  latest committed one;
- `last-complete`: the latest round whose every step completed (for the twin loop, its
  Verifier; for a single-agent scaffold, its agent run); without one, the latest committed.

A round is eligible under `best-evidence` only when it was verified: a round cut by a
budget before its Verifier finished is scored only by the loop's re-run of the built-in
checks and every probe (no model call), and where even that could not run it has no
evidence score, whatever its Migrator wrote.
`explain` says so for each round ("round 2: cut by the wall-time budget during the
Verifier: not eligible"), so a summary never names a rule without the rounds it left out.
The same rule decides a bench's r-round results (`choice`, for r = 1..R).
"""

from __future__ import annotations

from typing import Literal, Protocol


class RoundState(Protocol):
    """What the rule reads of a round (`harness.run.directory.RoundState`, which imports this module)."""

    round: int
    done: list
    commit: str | None
    evidence_score: int | None
    note: str


class RunState(Protocol):
    """What the rule reads of a run (`harness.run.directory.RunState`)."""

    rounds: list
    stop_reason: str
    status: str
    final_round: int | None
    final_choice: str


FinalRule = Literal["best-evidence", "last-complete"]
FINAL_RULES: tuple[FinalRule, ...] = ("best-evidence", "last-complete")

RULE_TEXT: dict[str, str] = {
    "best-evidence": "best evidence score (established − violated) among verified rounds, ties to the latest; "
    "without a verified round, the latest committed",
    "last-complete": "the latest round whose every step completed; without one, the latest committed",
}

_STEP_NAMES = {"diagnose": "the Diagnoser", "migrate": "the Migrator", "verify": "the Verifier"}
_BUDGET_NAMES = {"wall_time": "wall-time", "tokens": "token", "dollars": "dollar", "calls": "model-call"}


def complete(rs: RoundState) -> bool:
    """Whether every step of the round completed (a twin round: its Verifier; a single agent's: its run)."""
    return "verify" in rs.done or ("diagnose" not in rs.done and "migrate" in rs.done)


def choice(state: RunState, rounds: int, rule: FinalRule = "best-evidence") -> int | None:
    """The round a run limited to `rounds` rounds delivers under `rule` (None: no round was committed)."""
    committed = [r for r in state.rounds if r.round <= rounds and r.commit]
    if rule == "last-complete":
        done = [r.round for r in committed if complete(r)]
        if done:
            return max(done)
    else:
        scored = [r for r in committed if r.evidence_score is not None]
        if scored:
            return max(scored, key=lambda r: (r.evidence_score, r.round)).round
    return max((r.round for r in committed), default=None)


def eligibility(state: RunState, rs: RoundState, rule: FinalRule) -> str:
    """One round's standing under `rule`: what happened to it, then `eligible` or `not eligible`."""
    if not rs.commit:
        if "diagnose" in rs.done and state.stop_reason.startswith(f"round {rs.round}: the Diagnoser found nothing"):
            return f"round {rs.round}: the Diagnoser found nothing left, no new candidate: not eligible"
        return f"round {rs.round}: {cut_text(state, rs)}, nothing committed: not eligible"
    if rule == "last-complete":
        if complete(rs):
            return f"round {rs.round}: complete: eligible"
        return f"round {rs.round}: {cut_text(state, rs)}: not eligible"
    if rs.evidence_score is not None and not complete(rs):  # the loop's re-run scored what the budget cut
        return (
            f"round {rs.round}: {cut_text(state, rs)}, verified by the re-run of the built-in checks and every "
            f"probe only, evidence score {rs.evidence_score}: eligible"
        )
    if rs.evidence_score is not None:
        return f"round {rs.round}: verified, evidence score {rs.evidence_score}: eligible"
    if complete(rs):  # a single agent's round: nothing verifies it
        return f"round {rs.round}: complete: eligible"
    return f"round {rs.round}: {cut_text(state, rs)}: not eligible"


def cut_text(state: RunState, rs: RoundState) -> str:
    """What stopped an incomplete round, and during which step: `cut by the wall-time budget during the Verifier`."""
    pending = next((step for step in ("diagnose", "migrate", "verify") if step not in rs.done), "verify")
    if "diagnose" not in rs.done and "migrate" not in rs.done and rs.note.startswith("stopped by budget"):
        pending = "migrate"  # a single agent's round: its one step is the agent's run
    during = "the agent's run" if pending == "migrate" and "diagnose" not in rs.done else _STEP_NAMES[pending]
    reason = state.stop_reason
    if reason.startswith("budget: "):
        kind = reason.removeprefix("budget: ").split(" ", 1)[0]
        return f"cut by the {_BUDGET_NAMES.get(kind, kind)} budget during {during}"
    if reason.startswith("error: "):
        return f"cut by an internal error during {during}"
    return f"cut during {during} ({reason or state.status})"


NO_EVIDENCE_TEXT = "this scaffold keeps no evidence: the latest committed round"


def explain(state: RunState, rounds: int, rule: FinalRule = "best-evidence", *, evidence: bool = True) -> str:
    """The final choice in words: the round, the rule and every round's eligibility, on one line.

    Args:
        evidence: whether the scaffold keeps evidence; one that keeps none (base, mini-swe-agent) has no
            verified round, so `best-evidence` is its latest committed round, and is said so.
    """
    chosen = choice(state, rounds, rule)
    standing = "; ".join(eligibility(state, rs, rule) for rs in sorted(state.rounds, key=lambda r: r.round))
    head = f"round {chosen}" if chosen is not None else "no round"
    text = RULE_TEXT[rule] if evidence or rule != "best-evidence" else NO_EVIDENCE_TEXT
    return f"{head} by the rule '{rule}' ({text})" + (f" — {standing}" if standing else "")


def settle(state: RunState, rounds: int, rule: FinalRule = "best-evidence", *, evidence: bool = True) -> None:
    """Set the state's final round and the reason for it (`explain`)."""
    state.final_round = choice(state, rounds, rule)
    state.final_choice = explain(state, rounds, rule, evidence=evidence)
