"""Bounded similarity measures (002, §C.5): every score is in [0, 1], 1 = identical.

Each measure promotes both operands to float32 first and maps any NaN, infinity or
shape mismatch to 0, so a degenerate output can never look similar. The reference's
noise (its disagreement with its own float64 run) is measured with `precision=np.float64`
instead: rounded to float32 first, a disagreement below one float32 step would read 0. The constant
`EPS` only guards divisions by zero; it cannot be tuned to change a verdict.

Which measure to use follows the quantity compared:

- `tensor_similarity`: arrays (activations, parameters, gradients). Geometric mean
  of direction (cosine) and magnitude (norm ratio), so a uniform scaling bug that a
  cosine alone would miss still lowers the score.
- `distributional_similarity`: logits over a vocabulary (last axis). One minus the
  Jensen–Shannon distance of the softmaxes; blind to a per-row additive constant,
  sensitive to temperature.
- `scalar_similarity`: single numbers (a loss). One minus the mean-relative error,
  reaching 0 when two values differ by their own average magnitude.
- `banded_scalar_similarity`: like `scalar_similarity`, but differences within
  `band` (the reference's own run-to-run spread) count as identical.
- `exact_agreement`: discrete outputs (token ids, labels, strings): the fraction of
  positions that agree exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

EPS = 1e-12


def _as_float(value: Any, precision: type[np.floating] = np.float32) -> np.ndarray | None:
    """Promote to a float array of `precision`; None where the value is not numeric."""
    try:
        arr = np.asarray(value)
    except Exception:
        return None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        return None
    return arr.astype(precision)


def _pair(ref: Any, cand: Any, precision: type[np.floating] = np.float32) -> tuple[np.ndarray, np.ndarray] | None:
    """Both operands as float arrays of `precision` and the same shape with finite entries, else None."""
    a, b = _as_float(ref, precision), _as_float(cand, precision)
    if a is None or b is None or a.shape != b.shape:
        return None
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    return a, b


def _clip(score: float) -> float:
    if not math.isfinite(score):
        return 0.0
    return float(min(1.0, max(0.0, score)))


def tensor_similarity(ref: Any, cand: Any, *, precision: type[np.floating] = np.float32) -> float:
    """sqrt(max(cos, 0) * min(|a|,|b|) / max(|a|,|b|)) over the flattened arrays.

    Two all-zero arrays are identical (1.0); a zero array against a non-zero one is 0.
    An empty pair of equal shape is identical.
    """
    pair = _pair(ref, cand, precision)
    if pair is None:
        return 0.0
    a, b = (x.astype(np.float64).ravel() for x in pair)
    if a.size == 0:
        return 1.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    # Both norms are non-zero here, so no guard constant is needed (one would bias tiny arrays).
    cos = float(np.dot(a, b)) / (na * nb)
    magnitude = min(na, nb) / max(na, nb)
    return _clip(math.sqrt(max(cos, 0.0) * magnitude))


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def distributional_similarity(ref: Any, cand: Any, *, precision: type[np.floating] = np.float32) -> float:
    """1 - JS distance (base 2, so in [0, 1]) of softmax over the last axis, averaged over rows.

    Args:
        ref: logits, shape [..., vocab].
        cand: logits of the same shape.
    """
    pair = _pair(ref, cand, precision)
    if pair is None:
        return 0.0
    a, b = (x.astype(np.float64) for x in pair)
    if a.ndim == 0 or a.shape[-1] == 0:
        return 0.0
    p = _softmax(a.reshape(-1, a.shape[-1]))
    q = _softmax(b.reshape(-1, b.shape[-1]))
    m = 0.5 * (p + q)

    def _kl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(x > 0, x * np.log2(np.maximum(x, EPS) / np.maximum(y, EPS)), 0.0)
        return terms.sum(axis=-1)

    jsd = np.clip(0.5 * _kl(p, m) + 0.5 * _kl(q, m), 0.0, 1.0)
    return _clip(float(np.mean(1.0 - np.sqrt(jsd))))


def scalar_similarity(ref: Any, cand: Any, *, precision: type[np.floating] = np.float32) -> float:
    """max(0, 1 - 2|a - b| / (|a| + |b|)), averaged element-wise for arrays of scalars."""
    return banded_scalar_similarity(ref, cand, 0.0, precision=precision)


def banded_scalar_similarity(ref: Any, cand: Any, band: float, *, precision: type[np.floating] = np.float32) -> float:
    """Scalar similarity where a difference within `band` counts as none.

    Args:
        ref: the reference number (or array of numbers).
        cand: the candidate's.
        band: half-width of the reference's own spread (>= 0), e.g. the largest
            difference between two runs of the original.
        precision: the float type both operands are promoted to (float32 unless the
            reference's noise is measured).
    """
    if not (isinstance(band, (int, float)) and math.isfinite(band) and band >= 0):
        return 0.0
    pair = _pair(ref, cand, precision)
    if pair is None:
        return 0.0
    a, b = (x.astype(np.float64) for x in pair)
    if a.size == 0:
        return 1.0
    excess = np.maximum(np.abs(a - b) - band, 0.0)
    denom = np.abs(a) + np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(excess == 0.0, 0.0, 2.0 * excess / np.maximum(denom, EPS))
    return _clip(float(np.mean(np.maximum(0.0, 1.0 - rel))))


def exact_agreement(ref: Any, cand: Any) -> float:
    """Fraction of positions equal exactly (token ids, labels, strings, nested lists).

    Numbers are compared after float32 promotion; anything else with `==`. A shape
    or length mismatch, or a NaN on either side, is 0.
    """
    a, b = _as_float(ref), _as_float(cand)
    if a is not None and b is not None:
        if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
            return 0.0
        if a.size == 0:
            return 1.0
        return _clip(float(np.mean(a == b)))
    if isinstance(ref, (list, tuple)) and isinstance(cand, (list, tuple)):
        if len(ref) != len(cand):
            return 0.0
        if not ref:
            return 1.0
        return _clip(sum(exact_agreement(x, y) for x, y in zip(ref, cand, strict=True)) / len(ref))
    try:
        return 1.0 if ref == cand and type(ref) is type(cand) else 0.0
    except Exception:
        return 0.0


MEASURES = {
    "tensor": tensor_similarity,
    "distributional": distributional_similarity,
    "scalar": scalar_similarity,
    "exact": exact_agreement,
}
"""Measures by name, as probe specs refer to them (banded scalar needs its band, so it is separate)."""
