"""A run that started beside its task's check: model calls stop once the check fails, grading waits for it.

`twin migrate` starts the check (`benchmark_adapter.grading.pending_check`) and the run
together, so that the first model call does not wait for the oracle to be graded. The
run's model is wrapped (`CheckedModel`): a call made after the check failed is refused
with the check's one line (`TaskCheckFailed`), which stops the run. Before anything is
graded, the run waits for the check's verdict (`wait_for_check`), saying what it waits for.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from benchmark_adapter.grading.check import TaskCheckFailed

if TYPE_CHECKING:
    from benchmark_adapter.grading.pending_check import PendingCheck
    from ground.model import Message, Model, ModelReply, ToolSchema
    from harness.run.progress import Progress
    from harness.run.session import Session


class CheckedModel:
    """The run's model, refusing every call once the task check has failed."""

    def __init__(self, model: Model, check: PendingCheck) -> None:
        self._model = model
        self._check = check
        self.name = model.name

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        self._check.raise_if_failed()
        return self._model.query(messages, tools, role=role)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def gate_model(session: Session, check: PendingCheck | None) -> None:
    """Make the session's model stop at the first call after `check` failed."""
    if check is not None:
        session.model = CheckedModel(session.model, check)


def saying_to_progress(check: PendingCheck | None, progress: Progress) -> contextlib.AbstractContextManager:
    """While the run's progress view is up, the check's rows are said through it (not over it)."""
    return check.saying_to(progress.message) if check is not None else contextlib.nullcontext()


def wait_for_check(session: Session, check: PendingCheck | None, progress: Progress) -> None:
    """Before grading: the check's verdict; a failed check stops the run as `stopped`.

    Raises:
        TaskCheckFailed: the check failed (the run is saved, stopped, with the check's line).
    """
    if check is None:
        return
    try:
        check.wait(progress.message)
    except TaskCheckFailed as exc:
        stop_for_check(session, exc)
        raise


def stop_for_check(session: Session, exc: TaskCheckFailed) -> None:
    """Record that the run stopped because its task's check failed."""
    session.state.status = "stopped"
    session.state.stop_reason = f"task check failed: {exc}"
    session.save()
