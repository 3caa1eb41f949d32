"""Regression probes: a confirmed counterexample kept as an executable, re-runnable check.

A regression probe is a matched probe of one saved input. Its property id is
derived from the kind and the input, so the same reproducer found twice is one
property; it is `violated` while the candidate still answers differently and
`established` once the difference is gone. Its record keeps the input, the
sides' settings and the comparison, in `context["rerun"]`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from evidence_store.records import EvidenceRecord, ProbeResult, Property
from probes.services.compare import Comparison, loosenings
from probes.services.matched import LEVEL, Probe, matched_probe, rerun_spec, verdict


def regression_id(kind: str, value: dict[str, Any]) -> str:
    """Stable name of a reproducer: a hash of its kind and canonical input."""
    digest = hashlib.sha256(json.dumps([kind, value], sort_keys=True).encode()).hexdigest()[:12]
    return digest


def regression_probe(
    kind: str,
    sides: dict[str, Any],
    input: dict[str, Any],
    comparison: dict[str, Any] | Comparison,
    **options: Any,
) -> Probe:
    """The probe replaying one reproducer (what a saved regression record re-runs)."""
    cmp = (
        comparison
        if isinstance(comparison, Comparison)
        else Comparison.model_validate({"kind": kind, **comparison})
    )
    return matched_probe(
        kind,
        sides,
        [{"name": regression_id(kind, input), "input": input}],
        cmp,
        property_prefix=f"regression:{kind}",
        description=options.pop("description", "")
        or f"a saved {kind} counterexample no longer differs",
        **options,
    )


def regression_result(
    ctx,
    kind: str,
    sides: dict[str, Any],
    value: dict[str, Any],
    comparison: Comparison,
    reference: dict[str, Any],
    candidate: dict[str, Any],
    **extra: Any,
) -> ProbeResult:
    """The result of a freshly confirmed reproducer, with the rerun spec of its regression probe."""
    prop = Property(
        id=f"regression:{kind}:{regression_id(kind, value)}",
        kind="differential",
        level=LEVEL,
        description=f"a saved {kind} counterexample no longer differs",
    )
    options = {
        "kind": kind,
        "sides": sides,
        "cases": [{"name": regression_id(kind, value), "input": value}],
        "comparison": comparison.model_dump(),
        "property_prefix": f"regression:{kind}",
        "description": prop.description,
        "timeout_s": 30.0,
    }
    context = {
        "probe": f"regression:{kind}",
        "input": value,
        "sides": sides,
        **extra,
        "rerun": rerun_spec(ctx, "probes.services.matched:factory", options),
    }
    return verdict(prop, comparison, reference, candidate, context)


def save_regression(store, result: ProbeResult, *, run_id: str, round: int) -> EvidenceRecord:
    """Append a regression result to an `EvidenceStore`; returns the stored record (with its id)."""
    if not result.property.id.startswith("regression:") or "rerun" not in result.context:
        raise ValueError(f"{result.property.id} is not a regression result with a rerun spec")
    record = EvidenceRecord.from_result(result, run_id=run_id, round=round)
    record.record_id = store.append(record)
    return record


def loosened_since(store, result: ProbeResult) -> list[str]:
    """What `result` compares less strictly than the first stored result of its property.

    A comparison is kept with every result; a later result of the same property that
    ignores more (headers, JSON paths, files, exception types) is named here, so the
    loop and the reports can refuse or flag a probe made to pass by comparing less.
    """
    if "comparison" not in result.context:
        return []
    earlier = [
        r for r in store.records(property_id=result.property.id) if "comparison" in r.context
    ]
    if not earlier:
        return []
    first = Comparison.model_validate(earlier[0].context["comparison"])
    return loosenings(first, Comparison.model_validate(result.context["comparison"]))
