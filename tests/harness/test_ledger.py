from __future__ import annotations

import multiprocessing

import pytest

from ground.errors import BudgetExceeded
from ground.model import Usage
from harness.models.budget import Budget, BudgetTracker
from harness.models.ledger import LEDGER_ENV, Ledger, LedgerBudget, LedgerLimits, budget_for_run


def _charge_many(path, n):
    ledger = Ledger(path)
    for _ in range(n):
        ledger.charge(Usage(prompt_tokens=10, completion_tokens=5), 0.01)


def test_concurrent_processes_charge_one_ledger_without_losing_updates(tmp_path):
    path = tmp_path / "ledger.json"
    Ledger.create(path, LedgerLimits())
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_charge_many, args=(path, 50)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    data = Ledger(path).read()
    assert data["calls"] == 200
    assert data["tokens"] == 200 * 15
    assert data["usd"] == pytest.approx(2.0)


def test_spent_bench_budget_stops_every_run(tmp_path):
    path = tmp_path / "ledger.json"
    ledger = Ledger.create(path, LedgerLimits(max_usd=0.05))
    combined = LedgerBudget(BudgetTracker(Budget()), ledger)
    combined.check()
    for _ in range(5):
        combined.charge(Usage(prompt_tokens=1), 0.01)
    with pytest.raises(BudgetExceeded) as info:
        combined.check()
    assert info.value.kind == "bench dollars"
    assert combined.spent.calls == 5  # the run's own tracker was charged too


def test_resumed_bench_keeps_what_was_spent(tmp_path):
    path = tmp_path / "ledger.json"
    Ledger.create(path, LedgerLimits(max_tokens=100)).charge(Usage(prompt_tokens=60), 0.0)
    again = Ledger.create(path, LedgerLimits(max_tokens=50))
    with pytest.raises(BudgetExceeded, match="bench tokens"):
        again.check()


def test_run_outside_a_bench_has_only_its_own_budget(tmp_path, monkeypatch):
    tracker = BudgetTracker(Budget())
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    assert budget_for_run(tracker) is tracker
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "l.json"))
    assert isinstance(budget_for_run(tracker), LedgerBudget)
