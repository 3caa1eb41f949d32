"""Comparing the named outputs of two sides: structure first, numbers second.

The tolerance of every numeric comparison comes from the reference's own noise:
the same reference program run at the working dtype and in float64 (or twice,
where float64 is not possible). With `d(x, y) = 1 - similarity(x, y)`, an output
is consistent when

    d(reference, candidate) <= SPREAD * max(d(reference, reference_f64), RESOLUTION)

`SPREAD` (10) allows an independent implementation its own rounding, which is of
the order of the reference's; `RESOLUTION` (2**-23, one float32 ulp) is the floor,
which stands in for a noise below one float32 step (a float32 loss usually agrees with
its float64 run to a fraction of a step), so the candidate gets at least ten ulps. The
noise itself is measured in float64 (`noise_distance`): the original's disagreement
with its own float64 run as it is, not after both are rounded to float32 (which would
read 0 for any disagreement under half a step). For discrete outputs (exact
agreement) the tolerance is the reference's own disagreement, doubled, without a
floor. For `banded` outputs the band is that same tolerance in absolute units and
the score is `banded_scalar_similarity`. The noise floor is recorded with every
result. A leaf whose tolerance reaches a whole distance unit (the reference does
not reproduce itself at all, e.g. an unseeded random draw) cannot fail, so it is
reported as uninformative and counts neither for nor against the candidate.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import measure_text as numbers
from similarity import (
    MEASURES,
    banded_scalar_similarity,
    exact_agreement,
)

SPREAD = 10.0
RESOLUTION = 2.0**-23
MEASURE_NAMES = (*MEASURES, "banded")


@dataclass
class SideOutput:
    """The outputs one side wrote: the manifest of named leaves and the arrays."""

    manifest: dict[str, dict]
    arrays: dict[str, np.ndarray]

    def leaf(self, path: str) -> Any:
        entry = self.manifest[path]
        if entry["kind"] == "array":
            return self.arrays[entry["key"]]
        return entry.get("value")


@dataclass
class LeafScore:
    path: str
    measure: str
    score: float
    noise: float
    tolerance: float
    ok: bool
    noise_measured: bool = True
    """False where the noise run had no such output: the noise is 0 because nothing measured it."""
    difference: float | None = None
    """A banded output's largest absolute difference from the reference, in the band's units."""

    @property
    def informative(self) -> bool:
        """Whether the comparison could fail: a reference that cannot reproduce itself
        (tolerance of a whole distance unit, e.g. an unseeded random draw) proves nothing."""
        return self.measure == "banded" or self.tolerance < 1.0

    def as_dict(self) -> dict:
        return {
            "measure": self.measure,
            "score": round(self.score, 9),
            "noise": self.noise,
            "tolerance": self.tolerance,
            "ok": self.ok,
            **({} if self.informative else {"informative": False}),
            **({} if self.noise_measured else {"noise_measured": False}),
            **({} if self.difference is None else {"difference": self.difference}),
        }


@dataclass
class Comparison:
    """Result of comparing candidate outputs with the reference's."""

    structure: list[str] = field(default_factory=list)
    leaves: list[LeafScore] = field(default_factory=list)

    @property
    def consistent(self) -> bool:
        return not self.structure and all(leaf.ok for leaf in self.leaves)

    @property
    def informative(self) -> list[LeafScore]:
        return [leaf for leaf in self.leaves if leaf.informative]

    @property
    def score(self) -> float:
        """Plain average of informative leaf scores; every structural mismatch counts as one 0."""
        scores = [leaf.score for leaf in self.informative] + [0.0] * len(self.structure)
        return float(np.mean(scores)) if scores else (0.0 if self.structure else 1.0)

    @property
    def noise_floor(self) -> float:
        """The largest reference self-disagreement among the informative leaves (a distance)."""
        return max((leaf.noise for leaf in self.informative), default=0.0)

    def failing(self) -> list[str]:
        return self.structure + [_failing_line(leaf) for leaf in self.leaves if not leaf.ok]


def _failing_line(leaf: LeafScore) -> str:
    """One failing output; a banded one by its difference against its band (both in the output's units)."""
    name = leaf.path or "<output>"
    if leaf.difference is not None:
        difference, band = numbers.tolerance(leaf.difference), numbers.tolerance(leaf.tolerance)
        return f"{name}: banded, largest difference {difference} > band {band}"
    distance = 1 - leaf.score
    text = f"{name}: {leaf.measure} fails: distance {numbers.distance(distance)}"
    text += f" > tolerance {numbers.tolerance(leaf.tolerance)}"
    if leaf.tolerance > 0:  # how far out, never a score that rounds to 1 beside a failure
        text += f" ({numbers.significant(distance / leaf.tolerance, 3)}× the tolerance)"
    return text


def _largest_difference(ref: np.ndarray, cand: Any) -> float | None:
    """The largest |ref - cand| of a banded output; None where the two cannot be compared number by number."""
    try:
        c = np.asarray(cand, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if c.shape != ref.shape or ref.size == 0:
        return None
    return float(np.max(np.abs(ref - c)))


def _dtype_kind(name: str) -> str:
    name = name.lower()
    if "bool" in name:
        return "bool"
    if "int" in name:
        return "int"
    if "complex" in name:
        return "complex"
    return "float"


NON_FINITE = frozenset({"nan", "inf", "-inf"})
"""How the driver writes a non-finite float leaf (its repr): still a float, not a string."""


def leaf_kind(entry: dict) -> tuple[str, tuple[int, ...] | None]:
    """(data kind, shape) of a leaf of a manifest: a number is 0-d; a string, None or an object has no shape.

    Kinds are an array's dtype kind (`bool`, `int`, `float`, `complex`) for numbers and
    arrays alike, `string`, `None`, or `<type> object` for what the driver could only repr.
    """
    if entry["kind"] == "array":
        return _dtype_kind(str(entry["dtype"])), tuple(entry["shape"])
    if "type" in entry:
        return f"{entry['type']} object", None
    value = entry.get("value")
    if isinstance(value, bool):
        return "bool", ()
    if isinstance(value, int):
        return "int", ()
    if isinstance(value, float) or value in NON_FINITE:
        return "float", ()
    return ("string" if isinstance(value, str) else "None" if value is None else type(value).__name__), None


def describe_leaf(entry: dict) -> str:
    """A leaf's data kind in words: `a float32 array of shape (3, 4)`, `an int number`, `a string`."""
    kind, shape = leaf_kind(entry)
    if entry["kind"] == "array":
        words = f"{entry['dtype']} array of shape {shape}"
    elif shape is not None:
        words = f"{kind} number"
    else:
        return "None" if kind == "None" else f"a {kind}"
    return ("an " if words[0] in "aeiou" else "a ") + words


def _leaf_mismatch(entry: dict, other: dict) -> str | None:
    """Why a candidate leaf is not of the reference leaf's data kind and shape; None where it is.

    A number and a 0-d array of the same kind are the same; an array of shape (1,) is not
    a number. What the reference could only repr is not compared.
    """
    (kind, shape), (other_kind, other_shape) = leaf_kind(entry), leaf_kind(other)
    if "type" in entry or (kind, shape) == (other_kind, other_shape):
        return None
    if entry["kind"] == other["kind"] == "array":  # the array's own words: shape first, then dtype
        if shape != other_shape:
            return f"shape {other_shape}, reference {shape}"
        return f"dtype {other['dtype']}, reference {entry['dtype']}"
    return f"{describe_leaf(other)} where the reference has {describe_leaf(entry)}"


def compare_structure(ref: SideOutput, cand: SideOutput) -> list[str]:
    """Names, containers, fields, shapes and data kinds of the leaves; one line per mismatch."""
    leaves = ("array", "value")
    problems = []
    for path, entry in ref.manifest.items():
        where = path or "<output>"
        other = cand.manifest.get(path)
        if other is None:
            problems.append(f"{where}: missing in the candidate's output")
            continue
        kind, other_kind = entry["kind"], other["kind"]
        if kind in ("mapping", "object") and other_kind in ("mapping", "object"):
            missing = [k for k in entry["keys"] if k not in other["keys"]]
            if missing:
                problems.append(f"{where}: fields {missing} missing (candidate has {other['keys']})")
        elif kind == "sequence" and other_kind == "sequence":
            if entry["length"] != other["length"]:
                problems.append(f"{where}: length {other['length']}, reference {entry['length']}")
        elif kind in leaves and other_kind in leaves:
            mismatch = _leaf_mismatch(entry, other)
            if mismatch:
                problems.append(f"{where}: {mismatch}")
        elif kind != other_kind:
            what = describe_leaf(other) if other_kind in leaves else f"a {other_kind}"
            problems.append(
                f"{where}: {what} where the reference has {describe_leaf(entry) if kind in leaves else 'a ' + kind}"
            )
    return problems


def default_measure(value: Any) -> str:
    """The measure a leaf gets unless the probe names one."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biu":
            return "exact"
        return "scalar" if value.size == 1 else "tensor"
    if isinstance(value, float):
        return "scalar"
    return "exact"


def measure_for(path: str, value: Any, measures: dict[str, str]) -> str:
    """The measure named for `path` (exact name or glob), else the default by shape."""
    if path in measures:
        return measures[path]
    for pattern, name in measures.items():
        if fnmatch.fnmatchcase(path, pattern):
            return name
    return default_measure(value)


MEASURE_NEEDS = {
    "tensor": "numbers (an array or a number)",
    "scalar": "numbers (a number, or an array of numbers)",
    "banded": "numbers (a number, or an array of numbers)",
    "distributional": "a float array of logits [..., classes]",
}
"""What each measure but `exact` (which takes anything) can compare."""


def measure_misfit(measure: str, entry: dict) -> str | None:
    """Why `measure` cannot compare a leaf of the manifest `entry`'s data kind; None where it can."""
    kind, shape = leaf_kind(entry)
    numeric = kind in ("bool", "int", "float") and shape is not None
    fits = measure == "exact" or (
        numeric and (measure != "distributional" or (kind == "float" and entry["kind"] == "array" and bool(shape)))
    )
    return None if fits else f"{measure} needs {MEASURE_NEEDS[measure]}, not {describe_leaf(entry)}"


def _check_measures(ref: SideOutput, measures: dict[str, str]) -> None:
    """Refuse a `compare` entry that names no output of the reference, or a measure that does not fit its data.

    Raises:
        ValueError: naming the entry, the output and what the measure needs.
    """
    leaves = {path: entry for path, entry in ref.manifest.items() if entry["kind"] in ("array", "value")}
    for pattern in measures:
        if not any(path == pattern or fnmatch.fnmatchcase(path, pattern) for path in leaves):
            names = ", ".join(sorted(p or "<output>" for p in leaves)[:12]) or "none"
            raise ValueError(
                f"compare names {pattern!r}, which is no output of the reference (outputs: {names}); "
                "name an output, or a glob such as 'grads/*'"
            )
    for path, entry in leaves.items():
        named = path in measures or any(fnmatch.fnmatchcase(path, pattern) for pattern in measures)
        measure = measure_for(path, None, measures) if named else "exact"
        misfit = measure_misfit(measure, entry)
        if misfit:
            raise ValueError(f"compare names {measure} for {path or '<output>'}: {misfit}")


def _distance(measure: str, a: Any, b: Any) -> float:
    if measure == "exact":
        return 1.0 - exact_agreement(a, b)
    return 1.0 - MEASURES[measure](a, b)


def noise_distance(measure: str, ref: Any, noise_ref: Any) -> float:
    """The reference's disagreement with its own second run (float64, or a rerun), in `measure`'s distance.

    Measured in float64: rounding both to float32 first would hide any disagreement under
    half a float32 step (a loss and its float64 run would read 0). Discrete outputs
    (`exact`) count the positions that differ, as their comparison does.
    """
    if measure == "exact":
        return 1.0 - exact_agreement(ref, noise_ref)
    return 1.0 - MEASURES["scalar" if measure == "banded" else measure](ref, noise_ref, precision=np.float64)


def compare_leaf(path: str, measure: str, ref: Any, cand: Any, noise_ref: Any) -> LeafScore:
    """Score one leaf and decide it against the reference's own noise (`noise_distance`)."""
    noise = noise_distance(measure, ref, noise_ref)
    if measure == "exact":
        tolerance = 2.0 * noise
        score = exact_agreement(ref, cand)
        return LeafScore(path, measure, score, noise, tolerance, (1.0 - score) <= tolerance + 1e-12)
    if measure == "banded":
        a = np.asarray(ref, dtype=np.float64)
        spread = np.abs(a - np.asarray(noise_ref, dtype=np.float64)) if np.shape(noise_ref) == a.shape else np.inf
        band = float(np.max(SPREAD * np.maximum(spread, RESOLUTION * np.abs(a)))) if a.size else 0.0
        if not math.isfinite(band):
            band = 0.0
        score = banded_scalar_similarity(ref, cand, band)
        return LeafScore(path, measure, score, noise, band, score >= 1.0, difference=_largest_difference(a, cand))
    tolerance = SPREAD * max(noise, RESOLUTION)
    score = 1.0 - _distance(measure, ref, cand)
    return LeafScore(path, measure, score, noise, tolerance, (1.0 - score) <= tolerance)


def compare_outputs(
    ref: SideOutput, cand: SideOutput, noise_ref: SideOutput, measures: dict[str, str] | None = None
) -> Comparison:
    """Compare structure, then every numeric or discrete leaf present in the reference.

    Args:
        ref: the reference at the working dtype.
        cand: the candidate.
        noise_ref: the reference again (float64, or a second run): its disagreement
            with `ref` is the noise floor.
        measures: output path (or glob) -> measure name ('tensor', 'distributional',
            'scalar', 'banded', 'exact').

    Raises:
        ValueError: a measure is unknown, names no output of the reference, or cannot
            compare the data of an output it names (the probe's fault, not the candidate's).
    """
    measures = measures or {}
    unknown = {m for m in measures.values() if m not in MEASURE_NAMES}
    if unknown:
        raise ValueError(f"unknown measure(s) {sorted(unknown)}; use one of {', '.join(MEASURE_NAMES)}")
    _check_measures(ref, measures)
    result = Comparison(structure=compare_structure(ref, cand))
    broken = {p.split(":")[0] for p in result.structure}
    for path, entry in ref.manifest.items():
        if entry["kind"] not in ("array", "value") or "type" in entry or (path or "<output>") in broken:
            continue
        if path not in cand.manifest or cand.manifest[path]["kind"] not in ("array", "value"):
            continue
        ref_value = ref.leaf(path)
        if entry["kind"] == "value" and not isinstance(ref_value, (int, float, str, bool)) and ref_value is not None:
            continue
        measured = path in noise_ref.manifest
        noise_value = noise_ref.leaf(path) if measured else ref_value
        measure = measure_for(path, ref_value, measures)
        leaf = compare_leaf(path, measure, ref_value, cand.leaf(path), noise_value)
        leaf.noise_measured = measured
        result.leaves.append(leaf)
    return result
