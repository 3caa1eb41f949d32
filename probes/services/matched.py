"""Matched cases: fixed inputs sent to both sides, one result per case.

`matched_probe(kind, sides, cases, comparison)` is the factory behind the HTTP,
process and Python API probes (and behind regression probes, which are matched
probes of one saved counterexample). Every result keeps what is needed to run it
again: the input, the sides' settings and the comparison (in full and as digest).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from evidence_store.records import Outcome, ProbeResult, Property
from probes.services.compare import Comparison, ProbeCannotTell, differences
from probes.services.session import DifferentialSession, SessionError

Probe = Callable[[Any], list[ProbeResult]]
LEVEL = 3
"""Service behaviour observed end to end (002 C.4: level 3)."""


def rerun_spec(ctx, factory: str, options: dict[str, Any]) -> dict[str, Any]:
    """The `context["rerun"]` entry of a result (see `probes.rerun.RerunSpec`)."""
    return {
        "factory": factory,
        "options": options,
        "task": str(ctx.task.root),
        "candidate": str(ctx.candidate),
    }


def verdict(
    prop: Property,
    comparison: Comparison,
    reference: dict[str, Any],
    candidate: dict[str, Any],
    context: dict[str, Any],
) -> ProbeResult:
    """Compare two observations of one input and turn the outcome into a result."""
    context = {
        **context,
        "comparison": comparison.model_dump(),
        "comparison_digest": comparison.digest(),
    }
    try:
        diffs = differences(comparison, reference, candidate)
    except ProbeCannotTell as exc:
        return ProbeResult(
            property=prop,
            outcome=Outcome.NOT_ESTABLISHED,
            context=context,
            observations={"reason": str(exc)},
            trace=str(exc),
        )
    observations = {
        "differences": diffs,
        "reference": _clip(reference),
        "candidate": _clip(candidate),
    }
    if diffs:
        observations["message"] = "differs in: " + "; ".join(diffs[:3])[:1200]
    outcome = Outcome.VIOLATED if diffs else Outcome.ESTABLISHED
    return ProbeResult(
        property=prop,
        outcome=outcome,
        score=0.0 if diffs else 1.0,
        context=context,
        observations=observations,
    )


def start_failure(prop: Property, exc: SessionError) -> ProbeResult:
    """A side that did not start: the candidate's failure if the original started, else none."""
    if exc.side == "candidate":
        return ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            observations={"differences": ["the candidate did not start"], "reason": str(exc)},
            trace=str(exc),
        )
    return ProbeResult(
        property=prop,
        outcome=Outcome.NOT_ESTABLISHED,
        observations={"reason": str(exc)},
        trace=str(exc),
    )


def _clip(obs: dict[str, Any], limit: int = 4000) -> dict[str, Any]:
    """An observation small enough to store: long texts are cut (the rerun has everything)."""

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            return value[:limit] + "…"
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    return cut(obs)


def matched_probe(
    kind: str,
    sides: dict[str, dict[str, Any]],
    cases: list[dict[str, Any]],
    comparison: dict[str, Any] | Comparison | None = None,
    *,
    property_prefix: str | None = None,
    description: str = "",
    timeout_s: float = 30.0,
) -> Probe:
    """A probe sending each case's input to both sides and comparing the answers.

    Args:
        kind: 'http', 'process' or 'python_api'.
        sides: per side, the driver settings (see `DifferentialSession`).
        cases: `[{"name": ..., "input": {...}}, ...]`; the input format is the kind's.
        comparison: the `Comparison` (or its fields); defaults for the kind otherwise.
        property_prefix: property ids are `<prefix>:<case name>` (default: the kind).

    Returns:
        `probe(ctx) -> list[ProbeResult]`, one result per case. A side that cannot
        start makes every case `not_established` (the probe could not tell).
    """
    cmp = (
        comparison
        if isinstance(comparison, Comparison)
        else Comparison.model_validate({"kind": kind, **(comparison or {})})
    )
    if cmp.kind != kind:
        raise ValueError(f"a {cmp.kind} comparison cannot judge a {kind} probe")
    names = [case["name"] for case in cases]
    if len(set(names)) != len(names):
        raise ValueError("case names must be unique")
    prefix = property_prefix or kind
    options = {
        "kind": kind,
        "sides": sides,
        "cases": cases,
        "comparison": cmp.model_dump(),
        "property_prefix": prefix,
        "description": description,
        "timeout_s": timeout_s,
    }

    def probe(ctx) -> list[ProbeResult]:
        props = [
            Property(
                id=f"{prefix}:{name}",
                kind="differential",
                level=LEVEL,
                description=description or f"{kind} behaviour of case {name} matches the original",
            )
            for name in names
        ]
        try:
            session = DifferentialSession(ctx, kind, sides, timeout_s=timeout_s).__enter__()
        except SessionError as exc:
            return [start_failure(p, exc) for p in props]
        results = []
        try:
            for prop, case in zip(props, cases, strict=True):
                one = {**options, "cases": [case]}
                context = {
                    "probe": kind,
                    "input": case["input"],
                    "sides": sides,
                    "rerun": rerun_spec(ctx, "probes.services.matched:factory", one),
                }
                try:
                    reference, candidate = session.observe(case["input"])
                except SessionError as exc:
                    results.append(
                        ProbeResult(
                            property=prop,
                            outcome=Outcome.NOT_ESTABLISHED,
                            context=context,
                            observations={"reason": str(exc)},
                            trace=traceback.format_exc(),
                        )
                    )
                    continue
                results.append(verdict(prop, cmp, reference, candidate, context))
        finally:
            session.close()
        return results

    return probe


def factory(**options: Any) -> Probe:
    """Rerun entry point: rebuilds a matched probe from the options a result stored."""
    return matched_probe(**options)
