"""A budget shared by several processes: the dollars and tokens of a whole bench.

Every trial of a bench charges the same ledger file (JSON under an exclusive
`flock`), and checks it before each model call. When the bench's budget is
spent, running trials stop cleanly at their next model call (`BudgetExceeded`)
and the bench starts no new trial.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from ground.errors import BudgetExceeded
from ground.model import Usage
from harness.models.budget import BudgetTracker, Spent

LEDGER_ENV = "TWIN_BENCH_LEDGER"


class LedgerLimits(BaseModel):
    """Limits of a bench; None means unlimited."""

    max_usd: float | None = Field(default=None, ge=0, description="Dollars over all trials.")
    max_tokens: int | None = Field(default=None, ge=0, description="Tokens over all trials.")


class Ledger:
    """The shared file: `{"limits": {...}, "usd": x, "tokens": n, "calls": n}`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, path: Path, limits: LedgerLimits) -> Ledger:
        """Create the ledger, or keep an existing one's spending (resumed bench) with new limits."""
        ledger = cls(path)
        with ledger._locked() as data:
            data["limits"] = limits.model_dump()
        return ledger

    @contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 1 << 20)
            data = json.loads(raw) if raw.strip() else {"limits": {}, "usd": 0.0, "tokens": 0, "calls": 0}
            yield data
            encoded = json.dumps(data).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, encoded)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> dict:
        with self._locked() as data:
            return dict(data)

    def check(self) -> None:
        """Raise `BudgetExceeded` if the bench's budget is spent."""
        data = self.read()
        limits = LedgerLimits.model_validate(data.get("limits") or {})
        if limits.max_usd is not None and data["usd"] >= limits.max_usd:
            raise BudgetExceeded("bench dollars", limits.max_usd, data["usd"])
        if limits.max_tokens is not None and data["tokens"] >= limits.max_tokens:
            raise BudgetExceeded("bench tokens", limits.max_tokens, data["tokens"])

    def charge(self, usage: Usage, cost_usd: float) -> None:
        with self._locked() as data:
            data["usd"] += cost_usd
            data["tokens"] += usage.prompt_tokens + usage.completion_tokens
            data["calls"] += 1


class LedgerBudget:
    """A run's own `BudgetTracker` plus the bench's shared `Ledger`: both are checked and charged."""

    def __init__(self, tracker: BudgetTracker, ledger: Ledger) -> None:
        self.tracker = tracker
        self.ledger = ledger
        self.budget = tracker.budget

    @property
    def spent(self) -> Spent:
        return self.tracker.spent

    def stop_clock(self) -> None:
        self.tracker.stop_clock()

    def wall_left(self) -> float | None:
        return self.tracker.wall_left()

    def check(self) -> None:
        self.tracker.check()
        self.ledger.check()

    def check_tool(self) -> None:
        self.tracker.check_tool()
        self.ledger.check()

    def charge(self, usage: Usage, cost_usd: float) -> None:
        self.tracker.charge(usage, cost_usd)
        self.ledger.charge(usage, cost_usd)


def budget_for_run(tracker: BudgetTracker) -> BudgetTracker | LedgerBudget:
    """The run's budget, joined to the bench ledger named by $TWIN_BENCH_LEDGER if any."""
    path = os.environ.get(LEDGER_ENV)
    return LedgerBudget(tracker, Ledger(Path(path))) if path else tracker
