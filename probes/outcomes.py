"""How a probe's runs become an outcome (DESIGN.md, "Probes and outcomes").

- `crash_outcome(blame)`: the one rule for a side that crashed: a crash blamed on the
  candidate's code (or its running out of time) is violated; one blamed on the probe's
  own code, or on no known code, is not_established: the probe could not tell.
- `crash_result`: that rule as a result, for matched probes and candidate checks alike.
- `decide_matched`: the outcome of a matched differential probe from its reference,
  noise and candidate runs (structure first, numbers second, forbidden imports).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from evidence_store.records import Outcome, ProbeResult, Property
from probes.base import not_established
from probes.compare import compare_outputs
from probes.context import ProbeContext

CANDIDATE_BLAME = frozenset({"candidate", "timeout"})
"""Who a crash can be blamed on for it to say something about the candidate."""


def crash_outcome(blame: str) -> Outcome:
    """The outcome of a side run that crashed, from who is to blame for it.

    Args:
        blame: 'candidate', 'timeout', 'probe' or 'unknown' (as `probes.sides.run_side` reports it).
    """
    return Outcome.VIOLATED if blame in CANDIDATE_BLAME else Outcome.NOT_ESTABLISHED


def crash_result(
    prop: Property,
    run: dict[str, Any],
    context: dict[str, Any],
    *,
    not_fitting: str,
    **observations: Any,
) -> ProbeResult:
    """The result of a run that crashed (`run["ok"]` false), by `crash_outcome`.

    Args:
        prop: the property examined.
        run: the failed run (`blame`, `trace`).
        context: the result's context.
        not_fitting: the message of a crash that is not the candidate's, with `{blame}`.
        **observations: further observations of a violated result.
    """
    if crash_outcome(run["blame"]) is Outcome.VIOLATED:
        return ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            context=context,
            trace=run["trace"],
            observations={"message": f"the candidate crashed ({run['blame']})", **observations},
        )
    return not_established(prop, not_fitting.format(blame=run["blame"]), trace=run["trace"], context=context)


def candidate_forbidden(report: dict, ctx: ProbeContext) -> list[dict]:
    """The forbidden imports a side report records whose importer is candidate code."""
    root = ctx.roots("candidate")["candidate"] or ""
    return [
        a
        for a in report.get("forbidden_imports", [])
        if (a.get("importer") or {}).get("file", "").startswith(root.rstrip("/") + "/")
    ]


def decide_matched(ctx, prop, meta, context, slot_dir, ref, noise, cand) -> ProbeResult:
    """The outcome of one probe from its reference, noise and candidate runs."""
    if not ref["ok"]:
        return not_established(
            prop,
            "the reference side failed: the probe does not fit the original",
            trace=ref["trace"],
            context=context,
        )
    context["inputs"] = _inputs_summary(slot_dir / "inputs")
    timing = {"reference_compute_s": ref["report"]["compute_s"]}
    if noise is None or not noise["ok"]:
        return not_established(
            prop,
            "the reference side failed on its second run",
            trace=(noise or {}).get("trace", ""),
            context=context,
        )
    if not cand["ok"]:
        return crash_result(
            prop,
            cand,
            context,
            not_fitting="the candidate side failed in {blame} code: the probe's calling "
            "convention may not fit the candidate",
            forbidden_imports=cand.get("error", {}).get("forbidden_imports", []),
        )
    timing["candidate_compute_s"] = cand["report"]["compute_s"]
    try:
        comparison = compare_outputs(ref["output"], cand["output"], noise["output"], meta.get("compare"))
    except ValueError as exc:
        return not_established(prop, f"bad probe metadata: {exc}", context=context)
    except (KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        # both manifests passed check_manifest; what still does not fit is the candidate's output
        return ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            context=context,
            trace=f"{type(exc).__name__}: {exc}",
            observations={"message": "the candidate's output cannot be compared with the reference's"},
        )
    forbidden = candidate_forbidden(cand["report"], ctx)
    problems = comparison.failing() + [
        f"candidate imports forbidden {a['module']} at {a['importer']['file']}:{a['importer']['line']}"
        for a in forbidden
    ]
    observations = {
        "outputs": {leaf.path or "<output>": leaf.as_dict() for leaf in comparison.leaves},
        "structure": comparison.structure,
        "noise_floor": comparison.noise_floor,
        "timing": timing,
    }
    if problems:
        observations["message"] = "; ".join(problems)[:2000]
    if not comparison.informative and not comparison.structure and not forbidden:
        return not_established(
            prop,
            "the probe returned nothing comparable (every output is beyond the reference's own reproducibility)",
            context=context,
        )
    uninformative = [leaf.path for leaf in comparison.leaves if not leaf.informative]
    if uninformative:
        observations["uninformative"] = uninformative
    return ProbeResult(
        property=prop,
        outcome=Outcome.VIOLATED if problems else Outcome.ESTABLISHED,
        score=comparison.score if not forbidden else 0.0,
        context=context,
        observations=observations,
    )


def _inputs_summary(inputs_dir: Path) -> dict[str, Any]:
    spec = inputs_dir / "inputs.json"
    if not spec.is_file():
        return {}
    meta = json.loads(spec.read_text())
    summary = {}
    arrays = np.load(inputs_dir / "inputs.npz") if (inputs_dir / "inputs.npz").is_file() else None
    for name, entry in meta.items():
        if entry["kind"] == "array" and arrays is not None:
            arr = arrays[entry["key"]]
            summary[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        else:
            summary[name] = entry["value"]
    return summary
