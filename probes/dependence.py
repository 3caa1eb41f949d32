"""Whether a probe's compared output comes from the original's component it names: the counterfactual runs.

A profile hook can say that the reference entered the component (`probes/reference_trace.py`), not that
what the probe compares came out of it: a probe can call the component, drop its result and compute the
output by hand. So, on the first reference run of a probe whose `component` is a function, method or
class of the original that ran (by a trace whose hook was still in place), the reference runs again
(same inputs, seed and dtype) with the component's functions answering through stand-ins
(`probes/counterfactual.py`): first giving values changed by far more than any tolerance (`perturb`),
and, where that left every output as it was, or for a procedure (it returned only None), doing nothing
at all (`skip`: what the component wrote or changed is missing too). twin compares the outputs here,
on the host:

- `changed`: an output moved: it depends on the component;
- `stopped`: a counterfactual run failed (the probe used a poisoned value, or missed the work of a
  component that did nothing): it depends on the component;
- `unchanged`: every output stayed what it was in every counterfactual run: the probe computed it
  without the component, and the property counts as established only against a re-implementation;
- `unchecked`: no stand-in could be installed (nothing of the original by that name): the trace's
  word stands.

A probe's code runs in the same process as the stand-ins and could, with deliberate effort, tell a
counterfactual run from the first one (the stand-ins, the driver's configuration) and change its
outputs only then; what this closes is a reference that drops its component's result, or that edits
or removes the trace that records what ran. The counterfactual runs are reference runs: they are kept
in the reference cache with the others and made once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probes.compare import SideOutput
from probes.sides import slot

CHANGED, STOPPED, UNCHANGED, UNCHECKED = "changed", "stopped", "unchanged", "unchecked"
RTOL, ATOL = 1e-3, 1e-6
"""Two runs' outputs are the same within these: the stand-ins move a value by at least a quarter of a unit
or half of it again (`counterfactual.SCALE`, `SHIFT`), far beyond a rerun's last digits."""
OUT, SKIP_OUT = "refcf", "refskip"
"""Where the `perturb` and the `skip` counterfactual runs of a probe write."""


def original_member(source: Path | None, name: str) -> bool:
    """Whether `name` is something inside a module of the original (not the module itself): what a
    counterfactual run can give a stand-in."""
    if source is None or not name:
        return False
    parts = name.split(".")
    for n in range(len(parts) - 1, 0, -1):
        base = source.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def counterfactual_runs(source: Path | None, dtype: str, components: dict[str, str], reference: dict) -> list[dict]:
    """The first counterfactual runs, after the first reference runs: one per probe whose `component`
    (probe name -> component, in `components`) is the original's and ran, by an intact trace; `skip`
    for a procedure, `perturb` for the rest."""
    runs = []
    for name, component in components.items():
        first = reference.get((name, "ref"))
        trace = first["report"].get("reference_trace") if first and first["ok"] else None
        if not isinstance(trace, dict) or trace.get("intact") is not True or not isinstance(trace.get("ran"), dict):
            continue
        if trace["ran"].get(component) is not True or not original_member(source, component):
            continue
        procedures = trace.get("procedures")
        skip = isinstance(procedures, list) and component in procedures
        runs.append(_run(name, component, dtype, "skip" if skip else "perturb"))
    return runs


def skip_runs(_source: Path | None, dtype: str, components: dict[str, str], reference: dict) -> list[dict]:
    """The `skip` runs for the probes whose `perturb` run left every output as it was."""
    return [
        _run(name, component, dtype, "skip")
        for name, component in components.items()
        if (name, OUT) in reference and _one(reference[(name, "ref")], reference[(name, OUT)]) == UNCHANGED
    ]


def _run(name: str, component: str, dtype: str, mode: str) -> dict:
    out = SKIP_OUT if mode == "skip" else OUT
    return {
        "out": f"{slot(name)}/{out}",
        "dtype": dtype,
        "make_inputs": True,  # drawn again, as the first run drew them: the same state after them
        "name": name,
        "inputs": f"{slot(name)}/inputs_{out}",
        "counterfactual": {"component": component, "mode": mode},
    }


def verdict(first: dict, perturbed: dict | None, skipped: dict | None = None) -> str | None:
    """What a probe's counterfactual runs say (see the module docstring); None where none was made."""
    said = [_one(first, run) for run in (perturbed, skipped) if run is not None]
    for answer in (CHANGED, STOPPED, UNCHANGED, UNCHECKED):
        if answer in said:
            return answer
    return None


def _one(first: dict, counterfactual: dict) -> str:
    if not counterfactual["ok"]:
        return STOPPED
    told = counterfactual["report"].get("counterfactual")
    if isinstance(told, dict) and told.get("stand_ins") == 0:
        return UNCHECKED
    return UNCHANGED if same_outputs(first["output"], counterfactual["output"]) else CHANGED


def same_outputs(a: SideOutput, b: SideOutput) -> bool:
    """Whether two reference runs wrote the same outputs: names, kinds, shapes, values (arrays within
    `RTOL`/`ATOL`, NaN equal to NaN)."""
    if list(a.manifest) != list(b.manifest):
        return False
    for path, entry in a.manifest.items():
        other = b.manifest[path]
        if entry.get("kind") != other.get("kind"):
            return False
        if entry["kind"] != "array":
            if entry != other:
                return False
            continue
        x, y = a.arrays[entry["key"]], b.arrays[other["key"]]
        if x.shape != y.shape or entry.get("dtype") != other.get("dtype"):
            return False
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            if not np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True
