"""Whether references recorded now are the frozen ones, within the original's own noise.

Used by `record_refs.py --check` (and so by `twin task check`): the recorder computes every
reference again from litgpt in the current environment and hands both sets here. Two float32
runs of the same program each lie within the noise `d(ref, ref_f64)` of the float64 run, so
they differ by at most twice that (one float32 step, 2**-23, the floor); discrete quantities
(names, flags, the checkpoint's exact tensors) must be equal. Self-contained: numpy and the
grader's own similarity measures (`grading.py`), so nothing of twin's is needed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from grading import scalar_similarity, tensor_similarity

DRIFT_SPREAD = 2.0
RESOLUTION = 2.0**-23


def _beyond(distance: float, noise: float) -> str | None:
    tolerance = DRIFT_SPREAD * max(noise, RESOLUTION)
    if math.isfinite(distance) and distance <= tolerance:
        return None
    return f"distance {distance:.3g} > tolerance {tolerance:.3g} (its noise {noise:.3g})"


def array_lines(frozen: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> list[str]:
    """Each frozen array (its `f64.` twin included) that the recording made now no longer gives."""
    lines = [f"{k}: recorded now but not frozen" for k in sorted(set(now) - set(frozen))]
    lines += [f"{k}: frozen but not recorded now" for k in sorted(set(frozen) - set(now))]
    for key in sorted(set(frozen) & set(now)):
        kept, made = np.asarray(frozen[key]), np.asarray(now[key])
        if kept.shape != made.shape or kept.dtype != made.dtype:
            lines.append(f"{key}: {kept.dtype}{list(kept.shape)} frozen, {made.dtype}{list(made.shape)} now")
        elif not np.issubdtype(made.dtype, np.floating) or key.startswith("load."):
            if not np.array_equal(kept, made):
                lines.append(f"{key}: differs (compared exactly)")
        else:
            twin = now.get(key[4:] if key.startswith("f64.") else "f64." + key)
            noise = 1.0 - tensor_similarity(made, twin) if twin is not None else 0.0
            why = _beyond(1.0 - tensor_similarity(kept, made), noise)
            if why:
                lines.append(f"{key}: {why}")
    return lines


def value_lines(frozen: dict[str, Any], now: dict[str, Any], other: dict[str, Any], prefix: str = "") -> list[str]:
    """Each frozen value (a number, a series of numbers, names, a flag) that the recording made now no longer gives.

    Args:
        frozen: values as frozen; now: as recorded now.
        other: the other run of each value's pair now (float64 for a float32 value, and back):
            their disagreement is the value's noise (none where a value has no pair).
        prefix: put before each name in the lines.
    """
    lines = []
    for key in sorted(set(frozen) | set(now)):
        name = f"{prefix}{key}"
        if key not in frozen or key not in now:
            lines.append(f"{name}: {'frozen but not recorded now' if key in frozen else 'recorded now but not frozen'}")
            continue
        kept, made = frozen[key], now[key]
        numeric = isinstance(made, float) or (isinstance(made, list) and made and isinstance(made[0], float))
        if not numeric:
            if kept != made:
                lines.append(f"{name}: differs (compared exactly)")
            continue
        kept_list, made_list = np.atleast_1d(kept).tolist(), np.atleast_1d(made).tolist()
        twins = np.atleast_1d(other[key]).tolist() if key in other else made_list
        if not len(kept_list) == len(made_list) == len(twins):
            lines.append(f"{name}: {len(kept_list)} values frozen, {len(made_list)} now")
            continue
        for i, (k, m, n) in enumerate(zip(kept_list, made_list, twins, strict=True)):
            why = _beyond(1.0 - scalar_similarity(k, m), 1.0 - scalar_similarity(m, n))
            if why:
                lines.append(f"{name}[{i}]: {why}" if isinstance(made, list) else f"{name}: {why}")
                break
    return lines


def check(frozen_arrays: dict, frozen_values: dict, arrays: dict, values: dict) -> list[str]:
    """Every drifted quantity, one line each (empty: the frozen references are what litgpt gives now)."""
    float32_now = {k: v for k, v in values.items() if k != "f64"}
    f64_now = values.get("f64", {})
    lines = array_lines(frozen_arrays, arrays)
    lines += value_lines({k: v for k, v in frozen_values.items() if k != "f64"}, float32_now, f64_now)
    lines += value_lines(frozen_values.get("f64", {}), f64_now, float32_now, prefix="f64.")
    return lines
