"""A round's budget plan: what is left of the run's budget, split between the roles by a stated policy.

At each round's start the twin loop splits what is left of every limited budget (tokens, dollars,
model calls, wall time) between the Diagnoser, the Migrator and the Verifier, keeping a reserve for
the harness's re-run of the built-in checks and the probes. Each role's prompt shows its share and
what the run has left (`budget_text`). A role that reaches its share is told once and must submit at
its next reply; one that replies without submitting, or goes past its share plus a small margin, is
submitted for by twin (`ShareWatch`, read by `roles.agent.Agent`): its work so far is kept and the
round goes on to the next role. A single agent (the base scaffold) sees what is left, and no share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from harness.models.budget import Budget, Spent

Role = Literal["diagnoser", "migrator", "verifier"]
ROLES: tuple[Role, ...] = ("diagnoser", "migrator", "verifier")


class BudgetShares(BaseModel):
    """How a round splits what is left of the run's budget (`[run.budget_shares]`; recorded in config.json)."""

    diagnoser: float = Field(default=0.15, ge=0, le=1, description="The Diagnoser's share of what is left.")
    migrator: float = Field(default=0.55, ge=0, le=1, description="The Migrator's share of what is left.")
    reserve: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Kept back for the harness's re-run of the built-in checks and every probe (wall time above all).",
    )
    margin: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="How far past its share (a fraction of the share) a role may go before twin submits for it.",
    )

    @model_validator(mode="after")
    def _leaves_the_verifier_some(self) -> BudgetShares:
        if self.diagnoser + self.migrator + self.reserve >= 1:
            raise ValueError("diagnoser + migrator + reserve must stay under 1: the Verifier gets the rest")
        return self

    @property
    def verifier(self) -> float:
        """The Verifier's share: what the Diagnoser, the Migrator and the reserve leave."""
        return 1.0 - self.diagnoser - self.migrator - self.reserve

    def of(self, role: Role) -> float:
        return {"diagnoser": self.diagnoser, "migrator": self.migrator, "verifier": self.verifier}[role]


class Amounts(BaseModel):
    """Amounts of each budget kind; None where the run sets no limit of that kind."""

    tokens: float | None = None
    usd: float | None = None
    calls: float | None = None
    wall_s: float | None = None

    def kinds(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


def used_amounts(spent: Spent) -> dict[str, float]:
    return {"tokens": spent.tokens, "usd": spent.usd, "calls": spent.calls, "wall_s": spent.wall_s}


def left_of(budget: Budget, spent: Spent) -> Amounts:
    """What is left of each limited kind (never below 0)."""
    used = used_amounts(spent)
    limits = {
        "tokens": budget.max_tokens,
        "usd": budget.max_usd,
        "calls": budget.max_calls,
        "wall_s": budget.max_wall_s,
    }
    return Amounts(**{k: max(0.0, float(v) - used[k]) for k, v in limits.items() if v is not None})


class RoundPlan(BaseModel):
    """One round's split, made at its start and kept in state.json (a resumed round keeps it)."""

    left: Amounts = Field(description="What was left of the run's budget when the round started.")
    shares: dict[str, Amounts] = Field(default_factory=dict, description="Each role's share of it.")

    @classmethod
    def make(cls, budget: Budget, spent: Spent, policy: BudgetShares) -> RoundPlan:
        left = left_of(budget, spent)
        shares = {role: Amounts(**{k: v * policy.of(role) for k, v in left.kinds().items()}) for role in ROLES}
        return cls(left=left, shares=shares)


def amounts_text(amounts: dict[str, float]) -> str:
    """`12,000 tokens, $0.30, 4 model calls, 120.0 s of wall time` (tokens and calls whole; dollars and
    seconds with a decimal point, as measurements: a replay on another machine masks their digits)."""
    parts = []
    if "tokens" in amounts:
        parts.append(f"{int(amounts['tokens']):,} tokens")
    if "usd" in amounts:
        parts.append(f"${amounts['usd']:.2f}")
    if "calls" in amounts:
        parts.append(f"{int(amounts['calls'])} model calls")
    if "wall_s" in amounts:
        parts.append(f"{amounts['wall_s']:.1f} s of wall time")
    return ", ".join(parts)


def budget_text(budget: Budget, spent: Spent, *, steps: int, share: Amounts | None = None, fraction: float = 0) -> str:
    """What a role's (or the single agent's) prompt says of its budget: what the run has left, its share of
    this round where it has one, and its own cap of model calls."""
    left = left_of(budget, spent).kinds()
    lines = []
    if left:
        lines.append(f"The run has left: {amounts_text(left)}.")
    else:
        lines.append("The run sets no token, dollar, model-call or wall-time limit.")
    if share is not None and share.kinds():
        lines.append(
            f"Your share of this round ({fraction:.0%} of what was left when it started): "
            f"{amounts_text(share.kinds())}. When you reach it you are told once and must submit at your next "
            "reply; past it, twin submits for you (your work so far is kept)."
        )
    lines.append(
        f"You have at most {steps} model calls in this turn: submit before the last; a turn that reaches it "
        "ends with nothing submitted."
    )
    return "\n".join(lines)


ShareStatus = Literal["within", "reached", "over"]


@dataclass
class ShareWatch:
    """One role's share of one round, watched from the run's budget (`roles.agent.ShareGauge`).

    Args:
        role: the role's name.
        share: what the role may spend this round.
        margin: how far past its share (a fraction of it) twin lets it go.
        spent: returns what the run has spent (the budget tracker's `spent`).
        start: what the run had spent when the role started.
    """

    role: str
    share: Amounts
    margin: float
    spent: Callable[[], Spent]
    start: Spent

    def used(self) -> dict[str, float]:
        now, before = used_amounts(self.spent()), used_amounts(self.start)
        return {k: now[k] - before[k] for k in now}

    def status(self) -> ShareStatus:
        """'over' past share plus margin in any kind, 'reached' at its share in any kind, else 'within'."""
        used, limits = self.used(), self.share.kinds()
        if any(used[k] >= v * (1 + self.margin) for k, v in limits.items()):
            return "over"
        if any(used[k] >= v for k, v in limits.items()):
            return "reached"
        return "within"

    def notice(self) -> str:
        """What the role is told once it reaches its share."""
        return (
            f"Budget: you have used your share of this round ({amounts_text(self.share.kinds())}). "
            "Your next reply must call `submit`, with what you have; twin submits for you otherwise."
        )
