"""How a probe's runs become an outcome (DESIGN.md, "Probes and outcomes").

- `record_blame` and `ended_blame`: the one blame rule, decided here from what a side
  left behind: an error record's frames (never the record's own claim: the driver runs
  in the candidate's process, which can write that file), or how its process ended.
- `crash_outcome(blame)`: what a candidate-side failure says. Only a failure located in
  the probe's own code, a side whose driver never started, or one twin's own machinery
  failed (`INFRASTRUCTURE`) is not_established;
  everything else the candidate side can do to fail (crash in its code, run out of
  time, end its process without a record, strip its traceback) is violated.
- `crash_result`: that rule as a result, for matched probes and candidate checks alike.
- `decide_matched`: the outcome of a matched differential probe from its reference,
  noise and candidate runs (structure first, numbers second, forbidden imports).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from evidence_store.records import Outcome, ProbeResult, Property
from ground.sandbox import ExecResult
from probes.base import not_established
from probes.compare import compare_outputs
from probes.context import ProbeContext
from probes.driver import STARTED

INFRASTRUCTURE = "infrastructure"
"""The blame of a side run that twin's own machinery failed (its work directory lost under it)."""

NOT_THE_CANDIDATE = frozenset({"probe", "not_started", INFRASTRUCTURE})
"""Blames of a candidate-side failure that say nothing about the candidate."""

CRASH_MESSAGES = {
    "candidate": "the candidate crashed (candidate)",
    "timeout": "the candidate crashed (timeout)",
    "ended": "the candidate side ended without producing its outputs ({status})",
    "unknown": "the candidate side failed with a traceback that names no probe code",
}
"""What a violated result says, per blame of the candidate-side failure."""


def record_blame(error: dict, *, candidate_root: str | None, probe_file: str | None) -> str:
    """Who the failure an error record (`error.json`) describes is blamed on, from its frames.

    'candidate' when any frame, or the importer of a refused forbidden import, is in the
    candidate's code; else 'probe' when a frame is in the probe file; else 'unknown'. A
    probe frame reached through candidate code (a callback, a code object compiled under
    the probe's name and called from the candidate) is the candidate's. The record's own
    `blame` field is not read.

    Args:
        error: the parsed record (written in the side's process: any shape).
        candidate_root: the candidate's root as the side saw it (None on the reference side).
        probe_file: the probe file's path as the side saw it.
    """
    frames = error.get("frames")
    files = [f.get("file") for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []
    files = [os.path.normpath(f) for f in files if isinstance(f, str) and f]
    attempts = error.get("forbidden_imports")
    if error.get("type") == "ModuleNotFoundError" and isinstance(attempts, list) and attempts:
        importer = attempts[-1].get("importer") if isinstance(attempts[-1], dict) else None
        if isinstance(importer, dict) and isinstance(importer.get("file"), str):
            files.append(os.path.normpath(importer["file"]))
    if candidate_root:
        root = os.path.normpath(candidate_root).rstrip("/") + "/"
        if any(f.startswith(root) for f in files):
            return "candidate"
    if probe_file and os.path.normpath(probe_file) in files:
        return "probe"
    return "unknown"


def ended_blame(result: ExecResult | None) -> tuple[str, str]:
    """(blame, status) of a side run that left neither its outputs nor an error record.

    'timeout' when the time limit killed it; 'not_started' when the driver never wrote
    its start line (the sandbox or the interpreter failed before any probe or candidate
    code ran); else 'ended': the process ended (an exit, a signal, a limit) after probe
    and candidate code began. A probe does not end its own process, and the probe file
    is the same on both sides, so on the candidate side that is the candidate's doing.
    """
    if result is None:  # a cached reference run without its record
        return "unknown", "no record"
    if result.timed_out:
        return "timeout", f"timed out after {result.duration_s:.0f}s"
    code = result.returncode
    status = result.exceeded or (f"signal {-code}" if code < 0 else f"exit {code}")
    return ("ended" if STARTED in result.stdout else "not_started"), status


def crash_outcome(blame: str) -> Outcome:
    """The outcome of a candidate-side run that failed, from who is to blame for it.

    Args:
        blame: as `record_blame`/`ended_blame` decide it ('candidate', 'timeout', 'ended',
            'unknown', 'probe', 'not_started'), or `INFRASTRUCTURE` (`probes.sides.run_side`).
    """
    return Outcome.NOT_ESTABLISHED if blame in NOT_THE_CANDIDATE else Outcome.VIOLATED


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
        not_fitting: the message of a crash in the probe's own code, with `{blame}`.
        **observations: further observations of a violated result.
    """
    if crash_outcome(run["blame"]) is Outcome.VIOLATED:
        message = CRASH_MESSAGES.get(run["blame"], CRASH_MESSAGES["unknown"])
        return ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            context=context,
            trace=run["trace"],
            observations={"message": message.format(status=run.get("status", "?")), **observations},
        )
    if run["blame"] == "not_started":
        why = f"the candidate side did not start ({run.get('status', '?')}): nothing was examined"
        return not_established(prop, why, trace=run["trace"], context=context)
    if run["blame"] == INFRASTRUCTURE:
        why = "twin's own machinery failed on the candidate side (infrastructure): nothing was examined"
        return not_established(prop, why, trace=run["trace"], context=context)
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
        why = "the reference side failed: the probe does not fit the original"
        if ref.get("blame") == INFRASTRUCTURE:
            why = "twin's own machinery failed on the reference side (infrastructure): nothing was examined"
        return not_established(prop, why, trace=ref["trace"], context=context)
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
    if context.get("noise_source"):  # with the outputs it qualifies: why a zero noise is zero (`reading`)
        observations["noise_source"] = context["noise_source"]
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
