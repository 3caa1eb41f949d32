"""Budgets of a run: tokens, dollars, model calls, wall time.

One `BudgetTracker` is shared by every role of a run. Models call `check()`
before each model call and `charge()` after it, and agents call `check_tool()` before
each tool call (one reply may carry several), so a run stops between calls,
never in the middle of writing anything: the loop catches `BudgetExceeded`
(`ground/errors.py`, where the roles can see it too) and ends the run cleanly.
"""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel, Field

from ground.errors import BudgetExceeded
from ground.model import Usage


class Budget(BaseModel):
    """Limits of one run; `None` means unlimited."""

    max_tokens: int | None = Field(default=None, ge=0, description="Prompt + completion tokens.")
    max_usd: float | None = Field(
        default=None, ge=0, description="Dollars, as litellm prices them."
    )
    max_calls: int | None = Field(default=None, ge=0, description="Model calls.")
    max_wall_s: float | None = Field(
        default=None, ge=0, description="Seconds since the run started (resumed time included)."
    )


class Spent(BaseModel):
    """What a run has used so far; saved with a run so a resumed run continues from it."""

    tokens_in: int = Field(default=0, description="Prompt tokens.")
    tokens_out: int = Field(default=0, description="Completion tokens.")
    tokens_cached: int = Field(default=0, description="Prompt tokens read from the provider's prompt cache.")
    tokens_estimated: int = Field(
        default=0, description="Of all tokens, those twin estimated because the reply reported none."
    )
    usd: float = Field(default=0.0, description="Dollars.")
    calls: int = Field(default=0, description="Model calls.")
    wall_s: float = Field(
        default=0.0,
        description="Seconds of wall time of the rounds: from the budget's start before the first round to the "
        "end of the last (resumed sessions added up); not the task check before nor grading after.",
    )

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def tokens_text(self) -> str:
        """Tokens for people: the total, the share estimated by twin and the share read from a cache."""
        text = f"{self.tokens:,} tokens"
        if self.tokens_estimated:
            text += (
                " (all estimated)"
                if self.tokens_estimated >= self.tokens
                else f" ({self.tokens_estimated:,} estimated)"
            )
        if self.tokens_in and self.tokens_estimated < self.tokens:
            # a reply without usage says nothing of a cache: a share of estimated tokens would read as 0%
            text += f", {self.tokens_cached / self.tokens_in:.0%} of prompt tokens cached"
        return text


class BudgetTracker:
    """Checks and charges a `Budget`; thread-safe, shared by all roles of a run.

    Args:
        budget: the limits.
        spent: what was used before (when resuming); wall time continues from it.
        running: whether the wall clock runs (False: a finished run's, which adds nothing more).
    """

    def __init__(self, budget: Budget, *, spent: Spent | None = None, running: bool = True) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._spent = (spent or Spent()).model_copy()
        self._wall_before = self._spent.wall_s
        self._started = time.monotonic()
        self._stopped: float | None = None if running else self._started

    def stop_clock(self) -> None:
        """End the run's wall time here: every later snapshot carries the same `wall_s`.

        The rounds are over (what comes after them, grading and the summary, is not in the
        figure; docs/loop.md, "Figures"). Calling it again keeps the first stop.
        """
        with self._lock:
            if self._stopped is None:
                self._stopped = time.monotonic()

    @property
    def spent(self) -> Spent:
        """A snapshot of what was used, wall time up to now."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> Spent:
        now = self._stopped if self._stopped is not None else time.monotonic()
        wall = self._wall_before + (now - self._started)
        return self._spent.model_copy(update={"wall_s": wall})

    def wall_left(self) -> float | None:
        """Seconds left of the wall budget (never below 0), or None without a wall limit.

        Every command a role runs, and every side of every probe, is limited to the smaller
        of its own limit and this (docs/loop.md, "Budgets").
        """
        if self.budget.max_wall_s is None:
            return None
        return max(0.0, self.budget.max_wall_s - self.spent.wall_s)

    def check(self) -> None:
        """Raise `BudgetExceeded` if any limit is already reached; call before a model call."""
        with self._lock:
            spent = self._snapshot()
        limits = (
            ("tokens", self.budget.max_tokens, spent.tokens),
            ("dollars", self.budget.max_usd, spent.usd),
            ("calls", self.budget.max_calls, spent.calls),
            ("wall_time", self.budget.max_wall_s, spent.wall_s),
        )
        for kind, limit, used in limits:
            if limit is not None and used >= limit:
                raise BudgetExceeded(kind, limit, used)

    def check_tool(self) -> None:
        """Raise `BudgetExceeded` before a tool call once the run may not go on; call before each.

        Wall time is spent at its limit. Tokens, dollars and model calls are spent once past it: a
        reply that brought the run to its limit was paid for within the budget and runs its tool
        calls (while the wall time lasts); one that took the run past a limit runs none.
        """
        with self._lock:
            spent = self._snapshot()
        if self.budget.max_wall_s is not None and spent.wall_s >= self.budget.max_wall_s:
            raise BudgetExceeded("wall_time", self.budget.max_wall_s, spent.wall_s)
        for kind, limit, used in (
            ("tokens", self.budget.max_tokens, spent.tokens),
            ("dollars", self.budget.max_usd, spent.usd),
            ("calls", self.budget.max_calls, spent.calls),
        ):
            if limit is not None and used > limit:
                raise BudgetExceeded(kind, limit, used)

    def charge(self, usage: Usage, cost_usd: float) -> None:
        """Add one model call. Never raises for a limit: the next `check()` does."""
        with self._lock:
            self._spent.tokens_in += usage.prompt_tokens
            self._spent.tokens_out += usage.completion_tokens
            self._spent.tokens_cached += usage.cached_tokens
            if usage.estimated:
                self._spent.tokens_estimated += usage.total_tokens
            self._spent.usd += cost_usd
            self._spent.calls += 1
