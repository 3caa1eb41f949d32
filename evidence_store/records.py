"""Typed, versioned evidence records (DESIGN.md, "Evidence record").

These types are the contract between probes (which produce results), the store
(which keeps them) and the loop (which reads them). They know nothing of roles
or prompts.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

SCHEMA_VERSION = 2
"""Version 2 added `ProbeResult.reference_run` (None on the records of version 1)."""


class Outcome(StrEnum):
    """What a check could say about a property."""

    ESTABLISHED = "established"
    """Ran with enough evidence; behaviour consistent with the property."""
    VIOLATED = "violated"
    """Ran with enough evidence; behaviour inconsistent with the property."""
    NOT_ESTABLISHED = "not_established"
    """The probe itself could not tell; not a failure of the candidate."""


class Property(BaseModel):
    """One property of the candidate that a probe examines."""

    id: str = Field(description="Stable identifier, e.g. 'forward.model.logits' or 'independence'.")
    kind: str = Field(
        description="Family of the check: 'differential', 'imports', 'independence', "
        "'param_tree', 'grad_liveness', 'jit', 'entrypoint', 'converter', 'audit', ..."
    )
    level: int = Field(
        default=0,
        description="Level as in 002 §C.4: 0 structure/independence, 1 module numerics, "
        "2 composed numerics/loss/grads, 3 end-to-end, 4 held-out behaviour.",
    )
    description: str = Field(default="", description="What the property means, in one sentence.")


class FrameworkCall(BaseModel):
    """A call the reference side made into a framework (neither the original nor the standard library)."""

    name: str = Field(description="What was called, by its public name, e.g. 'torch.optim.AdamW.step'.")
    caller: str = Field(description="The original's function that called it, or 'probe' (the probe file's own code).")
    count: int = Field(default=1, description="At how many places of its code that caller calls it.")


class ReferenceRun(BaseModel):
    """What a matched probe's reference side ran of what the probe names (its `component` and `uses`).

    A profile hook limited to the original's files records what ran (`probes/reference_trace.py`);
    a counterfactual reference run, with the component giving other values, tells whether the
    compared output came from it (`probes/dependence.py`). A probe whose own `component` the
    reference never executed, or whose outputs stayed the same without it, was compared against a
    re-implementation written in the probe, not against the original: its outcome says nothing
    yet about the original's behaviour there. So was one whose record of what ran is missing or
    was disturbed from inside the probe (not known: it counts the same). What it `uses` is
    recorded apart (`uses_not_ran`) and marks nothing: a probe often uses what only its
    candidate side needs (the converter that builds the candidate's parameters from the
    original's checkpoint), which the reference has no reason to run.
    """

    ran: list[str] = Field(default_factory=list, description="Named components the reference executed.")
    not_ran: list[str] = Field(
        default_factory=list,
        description="The probe's component, where the compared output did not come from it (see `reason`): the "
        "probe compared against a re-implementation of it.",
    )
    reason: str = Field(
        default="",
        description="Why the component is in `not_ran`: 'never ran' (the reference never executed it), "
        "'unchanged' (the outputs stayed the same when it gave other values), 'trace disturbed' (the probe "
        "removed or replaced the profile hook), 'trace missing' (the run recorded no trace); '' otherwise.",
    )
    counterfactual: str | None = Field(
        default=None,
        description="What the counterfactual run said of the component: 'changed' or 'stopped' (the output "
        "depends on it), 'unchanged', 'unchecked' (no stand-in could be installed, e.g. a module); None where "
        "none was made (the component never ran, is not the original's, or a record older than this field).",
    )
    uses_not_ran: list[str] = Field(
        default_factory=list, description="Components the probe `uses` that the reference never executed."
    )
    on_interface: list[str] = Field(
        default_factory=list,
        description="Those of `not_ran` that the task's interface names: the property is not yet established "
        "for them.",
    )
    calls: list[FrameworkCall] = Field(
        default_factory=list,
        description="Calls into a framework made by the original's code or the probe's (first seen first, bounded).",
    )


class ProbeResult(BaseModel):
    """What one probe says about one property (before it is stored)."""

    property: Property
    outcome: Outcome
    score: float | None = Field(
        default=None, description="Bounded similarity in [0, 1] where one applies."
    )
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="What is needed to re-run it: probe sources, inputs, seeds, versions, "
        "candidate commit, device and precision.",
    )
    observations: dict[str, Any] = Field(
        default_factory=dict,
        description="What was seen: per-output scores, noise floor, mismatching fields.",
    )
    trace: str = Field(default="", description="Traceback or log tail, kept for diagnosis.")
    reference_run: ReferenceRun | None = Field(
        default=None,
        description="What a matched probe's reference ran of the components it names; None where not recorded "
        "(a candidate-side check, a reference that failed, a record older than schema version 2).",
    )

    @property
    def reimplemented(self) -> list[str]:
        """The named components the reference never ran (compared against a re-implementation of them)."""
        return list(self.reference_run.not_ran) if self.reference_run is not None else []

    @property
    def open_on_interface(self) -> list[str]:
        """The named components on the task's interface that the reference never ran: an established
        outcome is not yet established for them."""
        return list(self.reference_run.on_interface) if self.reference_run is not None else []


class EvidenceRecord(ProbeResult):
    """A stored probe result: a `ProbeResult` placed in a run and round. Append-only."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    run_id: str = Field(description="The run this record belongs to.")
    round: int = Field(description="Loop round (0 for checks made before the first round).")
    time: float = Field(default_factory=time.time, description="Unix time of the result.")
    record_id: int | None = Field(
        default=None, description="Row id assigned by the store; None before it is appended."
    )

    @classmethod
    def from_result(cls, result: ProbeResult, *, run_id: str, round: int) -> EvidenceRecord:
        """Place a probe result in a run and round."""
        return cls(run_id=run_id, round=round, **result.model_dump())


class DiagnosisRecord(BaseModel):
    """A stored diagnosis D_t: the gaps, objectives and probe requests of one round. Append-only.

    The store keeps the diagnosis as the Diagnoser's structured output, as JSON; it
    does not interpret it.
    """

    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    run_id: str = Field(description="The run this diagnosis belongs to.")
    round: int = Field(description="Loop round the diagnosis opened.")
    diagnosis: dict[str, Any] = Field(description="The structured diagnosis, as JSON.")
    time: float = Field(default_factory=time.time, description="Unix time it was recorded.")
    diagnosis_id: int | None = Field(
        default=None, description="Row id assigned by the store; None before it is recorded."
    )


class RoundInfo(BaseModel):
    """One round of a run as the store knows it: when it started and which candidate it checked."""

    run_id: str = Field(description="The run.")
    round: int = Field(description="Loop round.")
    started: float = Field(description="Unix time the round was first recorded.")
    candidate_commit: str | None = Field(
        default=None, description="Commit of the candidate the round's evidence was taken on."
    )
    note: str = Field(default="", description="Free text, e.g. why the round stopped the loop.")
