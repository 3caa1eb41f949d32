from __future__ import annotations

import pickle
import threading
import time

import pytest
from pydantic import ValidationError

from ground.errors import BudgetExceeded, TwinError
from ground.model import Usage
from harness.models.budget import Budget, BudgetTracker, Spent


def test_unlimited_budget_never_stops():
    tracker = BudgetTracker(Budget())
    for _ in range(100):
        tracker.check()
        tracker.charge(Usage(prompt_tokens=10_000, completion_tokens=10_000), 5.0)
    assert tracker.spent.calls == 100


@pytest.mark.parametrize(
    "budget, kind, limit",
    [
        (Budget(max_tokens=150), "tokens", 150),
        (Budget(max_usd=0.25), "dollars", 0.25),
        (Budget(max_calls=2), "calls", 2),
    ],
)
def test_each_limit_raises_its_kind(budget, kind, limit):
    tracker = BudgetTracker(budget)
    tracker.check()
    tracker.charge(Usage(prompt_tokens=50, completion_tokens=30), 0.125)
    tracker.check()  # 80 tokens, $0.125, 1 call: all under
    tracker.charge(Usage(prompt_tokens=50, completion_tokens=30), 0.125)
    with pytest.raises(BudgetExceeded) as info:
        tracker.check()
    assert isinstance(info.value, TwinError)
    assert (info.value.kind, info.value.limit) == (kind, limit)
    assert info.value.used >= limit
    assert kind in str(info.value)


def test_wall_time_counts_time_spent_before_resuming():
    tracker = BudgetTracker(Budget(max_wall_s=100), spent=Spent(wall_s=99.9))
    time.sleep(0.15)
    with pytest.raises(BudgetExceeded) as info:
        tracker.check()
    assert info.value.kind == "wall_time"
    assert tracker.spent.wall_s >= 100


def test_a_stopped_clock_adds_nothing_more():
    tracker = BudgetTracker(Budget(), spent=Spent(wall_s=5.0))
    time.sleep(0.05)
    tracker.stop_clock()
    stopped = tracker.spent.wall_s
    time.sleep(0.1)
    tracker.stop_clock()  # a second stop keeps the first
    assert 5.05 <= stopped == tracker.spent.wall_s < 5.15
    finished = BudgetTracker(Budget(), spent=Spent(wall_s=5.0), running=False)  # a finished run resumed
    time.sleep(0.05)
    assert finished.spent.wall_s == 5.0


def test_resume_continues_from_spent():
    before = Spent(tokens_in=900, tokens_out=50, usd=1.0, calls=7)
    tracker = BudgetTracker(Budget(max_tokens=1000), spent=before)
    tracker.check()
    tracker.charge(Usage(prompt_tokens=40, completion_tokens=10), 0.5)
    spent = tracker.spent
    assert (spent.tokens_in, spent.tokens_out, spent.calls, spent.usd) == (940, 60, 8, 1.5)
    with pytest.raises(BudgetExceeded, match="tokens budget exhausted: used 1000 of 1000"):
        tracker.check()
    assert before.calls == 7  # the caller's object is not mutated


def test_charge_is_thread_safe():
    tracker = BudgetTracker(Budget())

    def charge_many() -> None:
        for _ in range(2000):
            tracker.charge(Usage(prompt_tokens=1, completion_tokens=2), 0.001)

    threads = [threading.Thread(target=charge_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spent = tracker.spent
    assert (spent.calls, spent.tokens_in, spent.tokens_out) == (8000, 8000, 16000)
    assert spent.usd == pytest.approx(8.0)


def test_negative_limits_are_rejected():
    with pytest.raises(ValidationError):
        Budget(max_calls=-1)


def test_budget_exceeded_pickles_with_its_fields():
    exc = pickle.loads(pickle.dumps(BudgetExceeded("dollars", 2.0, 2.5)))
    assert (exc.kind, exc.limit, exc.used) == ("dollars", 2.0, 2.5)
    assert str(exc) == "dollars budget exhausted: used 2.5 of 2"
