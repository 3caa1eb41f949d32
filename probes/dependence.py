"""Whether a probe's compared output comes from the original's component it names: the counterfactual run.

A profile hook can say that the reference entered the component (`probes/reference_trace.py`), not that
what the probe compares came out of it: a probe can call the component, drop its result and compute the
output by hand. So, on the first reference run of a probe whose `component` is a function, method or
class of the original that ran, the reference runs once more (same inputs, seed and dtype) with the
component's functions answering through stand-ins that change what they give by far more than any
tolerance (`probes/counterfactual.py`). twin compares the two runs' outputs here, on the host:

- `changed`: an output moved: it depends on the component;
- `stopped`: the counterfactual run failed (the probe used a stand-in's value it could not use, or
  missed the work of a procedure that did nothing): it depends on the component;
- `unchanged`: every output is what it was: the probe computed it without the component, and the
  property counts as established only against a re-implementation;
- `unchecked`: no stand-in could be installed (the name is a module, or nothing of the original by that
  name): the trace's word stands.

The counterfactual run is a reference run: it is kept in the reference cache with the others.
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
OUT = "refcf"


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
    """The counterfactual runs to make after the first reference runs: one per probe whose `component`
    (probe name -> component, in `components`) is the original's and ran, by an intact trace."""
    runs = []
    for name, component in components.items():
        first = reference.get((name, "ref"))
        trace = first["report"].get("reference_trace") if first and first["ok"] else None
        if not isinstance(trace, dict) or trace.get("intact") is not True or not isinstance(trace.get("ran"), dict):
            continue
        if trace["ran"].get(component) is not True or not original_member(source, component):
            continue
        procedures = trace.get("procedures")
        runs.append(
            {
                "out": f"{slot(name)}/{OUT}",
                "dtype": dtype,
                "make_inputs": True,  # drawn again, as the first run drew them: the same state after them
                "name": name,
                "inputs": f"{slot(name)}/inputs_{OUT}",
                "counterfactual": {
                    "component": component,
                    "procedure": isinstance(procedures, list) and component in procedures,
                },
            }
        )
    return runs


def verdict(first: dict, counterfactual: dict | None) -> str | None:
    """What the counterfactual run says (see the module docstring); None where there was none."""
    if counterfactual is None:
        return None
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
