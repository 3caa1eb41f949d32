"""Re-executing a stored record from what it kept, and appending the new result.

A record can be re-run when its context holds a rerun spec:
`context["rerun"] = {"factory": "package.module:function", "options": {...},
"task": "<task dir>", "candidate": "<candidate dir>"}`. The factory, called with
the options, returns a probe: a callable `probe(ctx) -> ProbeResult` (or a list of
them). It runs through `probes.suite.run_suite` in a probe context built for the
task and candidate as the original ran (seed, device, precision, sandbox, commit);
the evidence store only keeps the original and the new record.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from evidence_store.records import EvidenceRecord, Outcome, ProbeResult
from evidence_store.schema import EvidenceStoreError
from evidence_store.store import EvidenceStore
from probes.base import Probe, load_factory
from probes.suite import run_suite
from task_model.loader import load_task

ContextBuilder = Callable[[Path, Path, Mapping[str, Any]], Any]
"""(task dir, candidate dir, the original record's context) -> the context given to the probe."""


class RerunError(EvidenceStoreError):
    """A record cannot be re-run: no rerun spec, or its factory cannot be loaded or called."""


class RerunSpec(BaseModel):
    """What a record keeps (as `context["rerun"]`) so that it can be executed again."""

    factory: str = Field(description="'package.module:function' returning the probe when called.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the factory."
    )
    task: str | None = Field(default=None, description="The task directory the probe ran for.")
    candidate: str | None = Field(
        default=None, description="The candidate directory the probe examined."
    )

    def to_context(self) -> dict[str, Any]:
        """The entry to put under `context["rerun"]` of a probe result."""
        return self.model_dump(mode="json")


def rerun_record(
    store: EvidenceStore,
    record_id: int,
    *,
    round: int | None = None,
    task: Path | str | None = None,
    candidate: Path | str | None = None,
    context_builder: ContextBuilder | None = None,
) -> EvidenceRecord:
    """Re-execute record `record_id` and append the new result to `store`.

    Args:
        round: the round to file the new record under (default: the original's round).
        task: the task directory (default: the one the spec names).
        candidate: the candidate to examine (default: the one the spec names), e.g. a
            later round's candidate to see whether a property still holds.
        context_builder: builds the context handed to the probe instead of `run_suite`
            (default: a probe context with the original's seed, device, precision, sandbox
            and candidate commit, closed and its work directory removed afterwards).

    Returns:
        The appended record (with its record id). Its context is the original's, updated
        with what the probe reported, and names the record it re-ran (`rerun_of`). A probe
        that raises is recorded as `not_established` with its traceback: it could not tell.

    Raises:
        RerunError: the record has no usable rerun spec (or it names no task or candidate
            and none is given), or its factory cannot be loaded or does not return a probe.
    """
    original = store.get(record_id)
    stored = _spec(original)
    spec = stored.model_copy(
        update={
            "task": str(task or stored.task or ""),
            "candidate": str(candidate or stored.candidate or ""),
        }
    )
    for name in ("task", "candidate"):
        if not getattr(spec, name):
            raise RerunError(f"record {record_id}: its rerun spec names no {name}; give one")
    probe = _guarded(_load_probe(spec, record_id), original)
    carried = dict(original.context)
    if spec.candidate != stored.candidate:
        carried.pop("candidate_commit", None)  # the original's commit says nothing of this one
    task_dir, candidate_dir = Path(str(spec.task)), Path(str(spec.candidate))
    if context_builder is not None:
        results = probe(context_builder(task_dir, candidate_dir, carried))
    else:
        with run_suite(load_task(task_dir), candidate_dir, [probe], **_run_options(carried)) as suite:
            results = suite.results
    result = _as_result(results, original)
    # What the original kept (seeds, versions, commit) still describes this execution unless
    # the probe reports otherwise; the spec names the task and candidate actually used.
    context = {**carried, **result.context, "rerun_of": record_id}
    context["rerun"] = {**spec.to_context(), **result.context.get("rerun", {})}
    record = EvidenceRecord.from_result(
        result.model_copy(update={"context": context}),
        run_id=original.run_id,
        round=original.round if round is None else round,
    )
    record.record_id = store.append(record)
    return record


def _spec(record: EvidenceRecord) -> RerunSpec:
    raw = record.context.get("rerun")
    if raw is None:
        raise RerunError(
            f"record {record.record_id} cannot be re-run: its context has no 'rerun' entry"
        )
    try:
        return RerunSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "rerun"
        raise RerunError(
            f"record {record.record_id} has a bad rerun spec: {where}: {first['msg']}"
        ) from None


def _load_probe(spec: RerunSpec, record_id: int) -> Callable[[Any], Any]:
    try:
        factory = load_factory(spec.factory)
    except ValueError as exc:
        raise RerunError(f"record {record_id}: {exc}") from None
    try:
        probe = factory(**spec.options)
    except TypeError as exc:
        raise RerunError(
            f"record {record_id}: {spec.factory} rejected its options: {exc}"
        ) from None
    if not callable(probe):
        raise RerunError(
            f"record {record_id}: {spec.factory} returned {type(probe).__name__}, not a probe"
        )
    return probe


def _guarded(probe: Callable[[Any], Any], original: EvidenceRecord) -> Probe:
    """`probe` returning validated results; one that raises is not_established for the original's property."""

    def guarded(ctx: Any) -> list[ProbeResult]:
        try:
            value = probe(ctx)
            items = value if isinstance(value, list) else [value]
            return [i if isinstance(i, ProbeResult) else ProbeResult.model_validate(i) for i in items]
        except Exception as exc:  # the probe could not tell: kept with its trace
            return [
                ProbeResult(
                    property=original.property,
                    outcome=Outcome.NOT_ESTABLISHED,
                    observations={"rerun_error": f"{type(exc).__name__}: {exc}"},
                    trace=traceback.format_exc(),
                )
            ]

    return guarded


def _as_result(results: list[ProbeResult], original: EvidenceRecord) -> ProbeResult:
    """The probe's result for the original's property (a probe may return several)."""
    for result in results:
        if result.property.id == original.property.id:
            return result
    raise RerunError(
        f"record {original.record_id}: the re-run probe returned no result for "
        f"{original.property.id!r}"
    )


def _run_options(context: Mapping[str, Any]) -> dict[str, Any]:
    """Run it as it ran: same seed, device, precision, sandbox and candidate commit."""
    names = {
        "seed": "seed",
        "device": "device",
        "precision": "precision",
        "sandbox": "sandbox_kind",
        "candidate_commit": "candidate_commit",
    }
    return {opt: context[key] for key, opt in names.items() if context.get(key) is not None}
