"""A task check running beside a run's start, so that the first model call need not wait for it.

`start_task_check` starts the check (oracle and empty candidate, `check.check_task`) in
a background thread, unless this task content passed in this sandbox kind before. The
run asks `raise_if_failed()` before each model call (a failed check stops it there, with
the check's one line) and `wait()`s for the verdict before it grades anything: no
reward is ever given on a task whose grader has not passed its own oracle. A pass is
remembered under twin's cache, as `ensure_task_checked` remembers it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from benchmark_adapter.grading.check import (
    CheckRow,
    TaskCheck,
    TaskCheckFailed,
    check_task,
    passed_before,
    remember_pass,
    slow_grade_warning,
    task_content_hash,
)
from task_model.model import Task

Say = Callable[[str], None]
WAIT_LINE_EVERY_S = 15.0


class PendingCheck:
    """One task check in a background thread.

    Args:
        task: the loaded task.
        sandbox: sandbox kind of the grader.
        say: where each graded row, and the wait for the last, is reported (one line each).
        when: what the failure line says about the run ("before any model call", "the run stops").
    """

    def __init__(
        self,
        task: Task,
        sandbox: str,
        *,
        say: Say | None = None,
        when: str = "the run stops",
        content_hash: str | None = None,
    ) -> None:
        self.task = task
        self.sandbox = sandbox
        self._say = say or (lambda line: None)
        self._when = when
        self._content_hash = content_hash or task_content_hash(task)
        self._done = threading.Event()
        self._check: TaskCheck | None = None
        self._graded: list[str] = []
        self.started = time.monotonic()
        threading.Thread(target=self._run, daemon=True, name=f"task-check-{task.name}").start()

    def _run(self) -> None:
        try:
            self._check = check_task(self.task, sandbox=self.sandbox, content_hash=self._content_hash, on_row=self._row)
            remember_pass(self._check, self.sandbox)
        except Exception as exc:  # twin's own failure: the check failed, it never hangs the run
            self._check = TaskCheck(task=self.task.name, content_hash=self._content_hash or "", sandbox=self.sandbox)
            self._check.rows.append(CheckRow(name="check", expected="", passed=False, error=f"{exc}"))
        finally:
            self._done.set()

    def _row(self, row: CheckRow, elapsed_s: float) -> None:
        self._graded.append(row.name)
        got = "not graded" if row.reward is None else f"reward {row.reward:.4f}"
        verdict = "ok" if row.passed else "FAILED"
        name = self.task.name
        self._say(f"task check of {name}: {row.name} {got} (expected {row.expected}) {verdict}, {elapsed_s:.0f} s")
        slow = (
            None
            if row.name != "oracle" or row.duration_s is None
            else slow_grade_warning(row.duration_s, self.task.verifier_timeout_s)
        )
        if slow is not None:
            self._say(slow)

    @contextlib.contextmanager
    def saying_to(self, say: Say) -> Iterator[None]:
        """Say rows to `say` while in the block (a run's progress view), then as before."""
        before, self._say = self._say, say
        try:
            yield
        finally:
            self._say = before

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def failure(self) -> str | None:
        """The check's failure line if it has ended failed (None: passed or still running)."""
        if not self._done.is_set() or self._check is None or self._check.passed:
            return None
        return (
            f"{self._check.failure_line()} — {self._when}; see `twin task check {self.task.root}`"
            " (or skip the check with --skip-task-check)"
        )

    def raise_if_failed(self) -> None:
        """Raises TaskCheckFailed if the check has ended failed; returns at once otherwise."""
        line = self.failure()
        if line is not None:
            raise TaskCheckFailed(line)

    def wait(self, say: Say | None = None, *, every_s: float = WAIT_LINE_EVERY_S) -> TaskCheck:
        """Wait for the verdict, saying every `every_s` what is still being graded.

        Raises:
            TaskCheckFailed: the check failed.
        """
        say = say or self._say
        while not self._done.wait(every_s):
            left = [name for name in ("oracle", "empty candidate") if name not in self._graded]
            elapsed = time.monotonic() - self.started
            say(f"waiting for the task check of {self.task.name}: grading {' and '.join(left)}, {elapsed:.0f} s")
        self.raise_if_failed()
        assert self._check is not None
        return self._check


def start_task_check(
    task: Task, sandbox: str, *, say: Say | None = None, when: str = "the run stops"
) -> PendingCheck | None:
    """Start checking `task` in the background, unless this content passed in this sandbox kind before (None)."""
    content_hash = task_content_hash(task)
    if passed_before(content_hash, sandbox):
        return None
    return PendingCheck(task, sandbox, say=say, when=when, content_hash=content_hash)
