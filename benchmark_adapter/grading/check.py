"""`twin task check`: the oracle run a Harbor user does before trusting a task, through twin's sandbox.

A task whose grader cannot score its own oracle grades every candidate 0, and a run
on it spends its model calls for nothing. So a task is checked by grading, with its
unchanged grader in twin's sandbox (as `twin grade` and a run's grading do):

- its oracle, which must reach the task's `oracle_min_reward` (0.97 unless
  `[metadata.twin]` says otherwise) with no error;
- an empty candidate, which must score 0;
- where asked, each seeded defect (`benchmark_adapter.grading.defects`), which must score below
  the oracle (by more than float noise, as `benchmark_adapter.grading.sweep` counts it caught);
- where asked, a sample of the frozen references, re-run on the original now, which must give
  them again within their own noise (`benchmark_adapter.grading.reference_drift`).

`ensure_task_checked` runs the first two once per task content and sandbox kind before
a run (`twin migrate`, `twin bench`) and remembers a pass under twin's cache directory.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from benchmark_adapter.grading.defects import Defect, apply_defect
from benchmark_adapter.grading.grader import Grade, GraderError, oracle_copy, run_grader
from benchmark_adapter.grading.sweep import TRIP_MARGIN
from ground.agent_tree import discard_tree
from ground.errors import TwinError
from ground.isolation import cache_root
from ground.tree_digest import content_digest
from ground.untrusted_io import write_atomic
from task_model.model import Task

SCHEMA_VERSION = 1
GradeFn = Callable[[Task, Path], Grade]


class TaskCheckFailed(TwinError):
    """The task's grader does not pass its own oracle or empty candidate (or a defect slips through)."""


class CheckRow(BaseModel):
    """One candidate the check graded."""

    name: str = Field(description="'oracle', 'empty candidate' or 'defect <name>'.")
    expected: str = Field(description="What the reward must be, e.g. '>= 0.97'.")
    reward: float | None = Field(default=None, description="The reward (None: no grade was made).")
    passed: bool = Field(description="Whether the reward is what was expected, with no error.")
    error: str | None = Field(default=None, description="The grade's error field, or why no grade was made.")
    output_tail: str = Field(default="", description="The grader's last output lines.")
    duration_s: float | None = Field(default=None, description="Wall time of its grade (None: no grade was made).")


class TaskCheck(BaseModel):
    """The outcome of checking one task."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    task: str = Field(description="Task name.")
    content_hash: str = Field(description="`task_content_hash` of the task checked ('' where it had none).")
    sandbox: str = Field(description="Sandbox kind the grader ran in.")
    rows: list[CheckRow] = Field(default_factory=list, description="One row per graded candidate.")

    @property
    def passed(self) -> bool:
        return all(row.passed for row in self.rows)

    def time_warning(self, verifier_timeout_s: float) -> str | None:
        """A warning when the oracle's grade took over half the verifier's timeout (None: it did not)."""
        oracle = next((row for row in self.rows if row.name == "oracle"), None)
        seconds = None if oracle is None else oracle.duration_s
        return None if seconds is None else slow_grade_warning(seconds, verifier_timeout_s)

    def failure_line(self) -> str:
        """One line naming what failed, with the first failing row's error."""
        failed = [row for row in self.rows if not row.passed]
        if not failed:
            return f"task {self.task}: check passed"
        first = next((row for row in failed if not (row.error or "").startswith(CUT_SHORT)), failed[0])
        got = "no grade" if first.reward is None else f"reward {first.reward:.4f}"
        why = f": {' '.join(first.error.split())[:400]}" if first.error else ""  # one line, whatever the grader said
        names = ", ".join(row.name for row in failed)
        return f"task {self.task}: check failed ({names}): {first.name} got {got}, expected {first.expected}{why}"


SLOW_SHARE = 0.5
"""The share of the verifier's timeout an oracle's grade may take before twin warns: a slower machine,
or a candidate a little slower than the oracle, would then be cut off and score 0."""


def slow_grade_warning(seconds: float, verifier_timeout_s: float) -> str | None:
    """`warning: …` when a grade of `seconds` takes over `SLOW_SHARE` of the verifier's timeout, else None."""
    if verifier_timeout_s <= 0 or seconds <= SLOW_SHARE * verifier_timeout_s:
        return None
    return (
        f"warning: the oracle's grade took {seconds:.0f} s, {seconds / verifier_timeout_s:.0%} of the verifier's "
        f"timeout ({verifier_timeout_s:.0f} s, [verifier] timeout_sec in task.toml): a slower machine or candidate "
        "would be cut off and score 0; raise the timeout or make the probes cheaper"
    )


def task_content_hash(task: Task) -> str | None:
    """The task's content as the grader's sandbox sees it (`ground.tree_digest`: every file's
    bytes, links resolved, byte code included); None where it is too large to key (never remembered)."""
    return content_digest(task.root)


CUT_SHORT = "cut short: "
"""How a row that was not waited for begins its error (another row had failed the check first)."""
RowEvent = Callable[["CheckRow", float], None]
"""Called with each graded row and the seconds since the check started (progress for a waiting user)."""


def check_task(
    task: Task,
    *,
    sandbox: str = "auto",
    defects: list[Defect] | None = None,
    grade_fn: GradeFn | None = None,
    content_hash: str | None = None,
    parallel: bool | None = None,
    cut_short: bool = False,
    on_row: RowEvent | None = None,
    reference_sample: int = 0,
) -> TaskCheck:
    """Grade the oracle, an empty candidate and (if given) each seeded defect; never raises on a failed row.

    The empty candidate is graded beside the oracle where the machine has two cores or
    more. With `cut_short` (the check before a run, which needs only a verdict), whichever
    of the two fails first decides the check, and the other is not waited for (graded one
    after the other: not started); its row says it was cut short, and a grader already
    running ends on its own, or with the process.

    Args:
        task: the loaded task.
        sandbox: sandbox kind of the grader.
        defects: seeded defects to apply to the oracle (None or empty: none).
        grade_fn: `(task, candidate) -> Grade`; defaults to `run_grader` in `sandbox`.
        content_hash: `task_content_hash(task)`, where the caller has it already.
        parallel: grade the oracle and the empty candidate at once (None: where there are 2 cores or more).
        cut_short: stop at the first failed part (else every row is graded, as `twin task check` shows them).
        on_row: told of each row as it is graded.
        reference_sample: how many probes' references to re-run on the original (a task made
            by `twin task new`), one row each, and the task's own recorder's check where it
            names one (`reference_check`); 0: none.
    """
    grade = grade_fn or (lambda t, c: run_grader(t, c, sandbox=sandbox))
    check = TaskCheck(task=task.name, content_hash=content_hash or task_content_hash(task) or "", sandbox=sandbox)
    started = time.monotonic()
    done: queue.Queue[tuple[int, list[CheckRow]]] = queue.Queue()
    parts = [lambda: _oracle_rows(task, defects or [], grade), lambda: [_empty_row(task, grade)]]
    if parallel is None:
        parallel = (os.cpu_count() or 1) >= 2
    if parallel:
        for index, part in enumerate(parts):
            threading.Thread(target=_deliver, args=(done, index, part), daemon=True, name="task-check").start()
    found: dict[int, list[CheckRow]] = {}
    for index, part in enumerate(parts):
        if not parallel:
            _deliver(done, index, part)
        rows_index, rows = done.get()
        found[rows_index] = rows
        for row in rows:
            if on_row is not None:
                on_row(row, time.monotonic() - started)
        if cut_short and not all(row.passed for row in rows) and len(found) < len(parts):
            first = next(row for row in rows if not row.passed)
            for other in range(len(parts)):
                if other not in found:
                    name, expected = ("oracle", _oracle_expected(task)) if other == 0 else ("empty candidate", "= 0")
                    why = f"{CUT_SHORT}the {first.name} failed the check first"
                    found[other] = [CheckRow(name=name, expected=expected, passed=False, error=why)]
            break
    oracle_rows, empty_rows = found[0], found[1]
    check.rows = [oracle_rows[0], *empty_rows, *oracle_rows[1:]]
    if reference_sample > 0:
        for row in reference_rows(task, sandbox, reference_sample):
            check.rows.append(row)
            if on_row is not None:
                on_row(row, time.monotonic() - started)
    return check


def reference_rows(task: Task, sandbox: str, size: int) -> list[CheckRow]:
    """A row per re-run reference: passed where the original still gives the frozen outputs."""
    from benchmark_adapter.grading.reference_drift import check_recorder, check_reference_drift, has_recorded_probes

    expected = "the original's outputs, within their noise"
    drifts = []
    try:
        if task.settings.reference_check:
            drifts.append(check_recorder(task, sandbox=sandbox))
        if has_recorded_probes(task):
            drifts += check_reference_drift(task, sandbox=sandbox, size=size)
    except TwinError as exc:
        return [CheckRow(name="references", expected=expected, passed=False, error=str(exc))]
    rows = []
    for drift in drifts:
        error = drift.error or ("drifted: " + "; ".join(drift.drifted) if drift.drifted else None)
        rows.append(CheckRow(name=f"reference {drift.probe}", expected=expected, passed=drift.passed, error=error))
    return rows


def _deliver(done: queue.Queue, index: int, part: Callable[[], list[CheckRow]]) -> None:
    try:
        rows = part()
    except Exception as exc:  # twin's own failure in one part: that part's failed row, never a hung check
        name = "oracle" if index == 0 else "empty candidate"
        rows = [CheckRow(name=name, expected="", passed=False, error=f"{type(exc).__name__}: {exc}")]
    done.put((index, rows))


def _oracle_expected(task: Task) -> str:
    return f">= {task.settings.oracle_min_reward:g}"


def _oracle_rows(task: Task, defects: list[Defect], grade: GradeFn) -> list[CheckRow]:
    """The oracle's row, then each defect's."""
    minimum = task.settings.oracle_min_reward
    rows: list[CheckRow] = []
    try:
        with oracle_copy(task) as oracle_dir:
            row = _row("oracle", _oracle_expected(task), lambda: grade(task, oracle_dir), lambda r: r >= minimum)
            rows.append(row)
            for defect in defects:
                rows.append(_defect_row(task, defect, oracle_dir, row.reward, grade))
    except TwinError as exc:  # no oracle, or its solve.sh failed
        rows = [CheckRow(name="oracle", expected=_oracle_expected(task), passed=False, error=str(exc))]
    return rows


def _empty_row(task: Task, grade: GradeFn) -> CheckRow:
    with tempfile.TemporaryDirectory(prefix="twin-empty-") as tmp:
        empty = Path(tmp) / "app"
        empty.mkdir()
        return _row("empty candidate", "= 0", lambda: grade(task, empty), lambda r: r == 0.0, empty=True)


def _row(name: str, expected: str, run: Callable[[], Grade], ok: Callable[[float], bool], *, empty=False) -> CheckRow:
    """Grade one candidate; a grader that cannot run (twin's side) is a failed row, not a crash."""
    try:
        result = run()
    except TwinError as exc:
        return CheckRow(name=name, expected=expected, passed=False, error=str(exc))
    # an empty candidate's grader may well say why it scored 0: that is not a failure
    error = None if empty else result.error
    return CheckRow(
        name=name,
        expected=expected,
        reward=result.reward,
        passed=ok(result.reward) and error is None,
        error=result.error,
        output_tail=result.log_tail[-2000:],
        duration_s=result.duration_s,
    )


def _defect_row(task: Task, defect: Defect, oracle_dir: Path, oracle: float | None, grade: GradeFn) -> CheckRow:
    name = f"defect {defect.name}"
    if oracle is None:
        return CheckRow(name=name, expected="< oracle", passed=False, error="the oracle was not graded")
    expected = f"< {oracle:.4f} (oracle)"
    with tempfile.TemporaryDirectory(prefix="twin-defect-") as tmp:
        try:
            candidate = apply_defect(oracle_dir, defect, Path(tmp) / "app")
        except TwinError as exc:
            return CheckRow(name=name, expected=expected, passed=False, error=str(exc))
        row = _row(name, expected, lambda: grade(task, candidate), lambda r: r < oracle - TRIP_MARGIN, empty=True)
        discard_tree(Path(tmp) / "app")
    return row


def default_defects(task: Task) -> Path | None:
    """twin's own defect list for a bundled task, if any: `tests/benchmark_adapter/defects/<folder>.py` for
    a task folder inside twin's own checkout only. A task is known by its folder, never by the name its
    task.toml gives: a user's task named like a bundled one, or a bundled one copied elsewhere, gets none
    (`--defects` gives it a list)."""
    repo, root = Path(__file__).resolve().parents[2], task.root.resolve()
    if repo not in root.parents:
        return None
    path = repo / "tests" / "benchmark_adapter" / "defects" / f"{root.name.replace('-', '_')}.py"
    return path if path.is_file() else None


def _passed_marker(task_hash: str, sandbox: str) -> Path:
    return cache_root() / "task-checks" / f"{task_hash[:32]}-{sandbox}.json"


def passed_before(content_hash: str | None, sandbox: str) -> bool:
    """Whether this task content passed its check in this sandbox kind before (never for a tree too large to key)."""
    return bool(content_hash) and _passed_marker(content_hash, sandbox).is_file()


def remember_pass(check: TaskCheck, sandbox: str) -> None:
    """Remember a passed check under twin's cache; a tree too large to key, or a cache not writable, is not."""
    if not check.passed or not check.content_hash:
        return
    marker = _passed_marker(check.content_hash, sandbox)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(marker.parent, marker.name, check.model_dump_json(indent=2).encode())
    except OSError:
        pass  # not remembered: the next run checks again


def ensure_task_checked(task: Task, sandbox: str, *, on_start: Callable[[], None] | None = None) -> TaskCheck | None:
    """Check `task` (oracle and empty candidate) unless this content passed in this sandbox kind before.

    Returns:
        The new check, or None when a remembered pass was used.

    Raises:
        TaskCheckFailed: the check failed (one line: what failed and the grader's error).
    """
    content_hash = task_content_hash(task)
    if passed_before(content_hash, sandbox):
        return None
    if on_start is not None:
        on_start()
    check = check_task(task, sandbox=sandbox, content_hash=content_hash)
    if not check.passed:
        raise TaskCheckFailed(
            f"{check.failure_line()} — before any model call; see `twin task check {task.root}`"
            " (or skip the check with --skip-task-check)"
        )
    remember_pass(check, sandbox)
    return check


__all__ = ["CheckRow", "TaskCheck", "TaskCheckFailed", "check_task", "ensure_task_checked", "GraderError"]
