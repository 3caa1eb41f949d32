"""The task check beside a run's start: both grades at once, cut short on the first failure, said as it goes."""

from __future__ import annotations

import threading
import time

import pytest

from benchmark_adapter.grading import check as check_module
from benchmark_adapter.grading.check import CUT_SHORT, TaskCheckFailed, check_task
from benchmark_adapter.grading.grader import Grade
from benchmark_adapter.grading.pending_check import PendingCheck, start_task_check
from harness.run.task_gate import CheckedModel
from task_model.loader import load_task
from tests.benchmark_adapter.test_check import make_task


def _grade(reward: float) -> Grade:
    return Grade(task="t", candidate="c", reward=reward, returncode=0, duration_s=0.0, sandbox="none")


def _is_empty(candidate) -> bool:
    return "twin-empty-" in str(candidate)


@pytest.fixture()
def task(tmp_path):
    return load_task(make_task(tmp_path))


def test_the_oracle_and_the_empty_candidate_are_graded_at_once(task):
    both = threading.Barrier(2, timeout=20)  # each grade waits for the other to have started

    def grade(t, candidate):
        both.wait()
        return _grade(0.0 if _is_empty(candidate) else 1.0)

    result = check_task(task, grade_fn=grade, parallel=True)
    assert result.passed and [row.name for row in result.rows] == ["oracle", "empty candidate"]


def test_one_after_the_other_where_asked(task):
    order: list[str] = []

    def grade(t, candidate):
        order.append("empty" if _is_empty(candidate) else "oracle")
        return _grade(0.0 if _is_empty(candidate) else 1.0)

    assert check_task(task, grade_fn=grade, parallel=False).passed and order == ["oracle", "empty"]


def test_a_failed_oracle_cuts_the_empty_candidate_short(task):
    never = threading.Event()

    def grade(t, candidate):
        if _is_empty(candidate):
            never.wait(30)  # a slow grader the check must not wait for
        return _grade(0.5)

    started = time.monotonic()
    result = check_task(task, grade_fn=grade, parallel=True, cut_short=True)
    assert time.monotonic() - started < 20 and not result.passed
    oracle, empty = result.rows
    assert oracle.reward == 0.5 and not oracle.passed
    assert empty.reward is None and empty.error.startswith(CUT_SHORT)
    assert result.failure_line().startswith("task modes: check failed (oracle, empty candidate): oracle got reward 0.5")
    never.set()


def test_one_after_the_other_a_failed_oracle_leaves_the_empty_candidate_ungraded(task):
    graded: list[str] = []

    def grade(t, candidate):
        graded.append(str(candidate))
        return _grade(0.5)

    result = check_task(task, grade_fn=grade, parallel=False, cut_short=True)
    assert len(graded) == 1 and result.rows[1].error.startswith(CUT_SHORT)


def test_without_cut_short_every_row_is_graded(task):
    result = check_task(task, grade_fn=lambda t, c: _grade(0.5), parallel=True)
    assert [row.reward for row in result.rows] == [0.5, 0.5]


def _pending(task, monkeypatch, tmp_path, grade, lines):
    monkeypatch.setattr(check_module, "_passed_marker", lambda h, s: tmp_path / "marks" / f"{h}-{s}.json")
    real = check_module.check_task
    monkeypatch.setattr(
        "benchmark_adapter.grading.pending_check.check_task", lambda t, **kw: real(t, grade_fn=grade, **kw)
    )
    return start_task_check(task, "bwrap", say=lines.append)


def test_a_passing_check_is_said_row_by_row_and_remembered(task, monkeypatch, tmp_path):
    lines: list[str] = []
    release = threading.Event()

    def grade(t, candidate):
        release.wait(20)
        return _grade(0.0 if _is_empty(candidate) else 1.0)

    pending = _pending(task, monkeypatch, tmp_path, grade, lines)
    waits: list[str] = []
    threading.Timer(0.5, release.set).start()
    check = pending.wait(waits.append, every_s=0.1)
    assert check.passed and pending.failure() is None
    assert any(line.startswith("waiting for the task check of modes: grading") for line in waits)
    assert any("oracle reward 1.0000 (expected >= 0.97) ok" in line for line in lines)
    assert start_task_check(task, "bwrap") is None  # remembered: the next run does not check again


def test_a_failing_check_stops_the_model_and_is_not_remembered(task, monkeypatch, tmp_path):
    lines: list[str] = []
    pending = _pending(task, monkeypatch, tmp_path, lambda t, c: _grade(0.3), lines)

    class Model:
        name = "m"
        label = "the model"

        def query(self, messages, tools=None, *, role="agent"):
            return "reply"

    model = CheckedModel(Model(), pending)
    with pytest.raises(TaskCheckFailed, match="check failed"):
        pending.wait()
    assert model.label == "the model" and model.name == "m"
    with pytest.raises(TaskCheckFailed, match="the run stops"):
        model.query([])
    assert not list((tmp_path / "marks").glob("*.json")) if (tmp_path / "marks").exists() else True
    assert isinstance(start_task_check(task, "bwrap"), PendingCheck)  # checked again next time


def test_the_model_answers_while_the_check_runs(task, monkeypatch, tmp_path):
    release = threading.Event()

    def grade(t, candidate):
        release.wait(20)
        return _grade(0.0 if _is_empty(candidate) else 1.0)

    pending = _pending(task, monkeypatch, tmp_path, grade, [])

    class Model:
        name = "m"

        def query(self, messages, tools=None, *, role="agent"):
            return "reply"

    assert CheckedModel(Model(), pending).query([]) == "reply" and not pending.done
    release.set()
    pending.wait()


def test_a_slow_oracle_is_warned_of_beside_the_run(task, monkeypatch, tmp_path):
    lines: list[str] = []

    def grade(t, candidate):
        seconds = 5.0 if _is_empty(candidate) else 45.0  # the task's verifier allows 60 s
        return Grade(task="t", candidate="c", reward=0.0 if _is_empty(candidate) else 1.0, returncode=0,
                     duration_s=seconds, sandbox="none")  # fmt: skip

    check = _pending(task, monkeypatch, tmp_path, grade, lines).wait(lambda _line: None)
    assert check.passed
    assert [ln for ln in lines if ln.startswith("warning")] == [check_module.slow_grade_warning(45.0, 60.0)]
