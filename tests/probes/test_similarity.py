from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probes.similarity import (
    banded_scalar_similarity,
    distributional_similarity,
    exact_agreement,
    scalar_similarity,
    tensor_similarity,
)

floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32)
vectors = arrays(np.float32, st.integers(1, 12), elements=floats)
ARRAY_MEASURES = [tensor_similarity, distributional_similarity, scalar_similarity, exact_agreement]


@settings(max_examples=60, deadline=None)
@given(vectors, vectors)
@pytest.mark.parametrize("measure", ARRAY_MEASURES)
def test_measures_bounded(measure, a, b):
    if a.shape != b.shape:
        b = np.resize(b, a.shape)
    score = measure(a, b)
    assert 0.0 <= score <= 1.0


@settings(max_examples=60, deadline=None)
@given(vectors, vectors)
@pytest.mark.parametrize("measure", ARRAY_MEASURES)
def test_measures_symmetric(measure, a, b):
    b = np.resize(b, a.shape)
    assert math.isclose(measure(a, b), measure(b, a), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(vectors)
@pytest.mark.parametrize("measure", ARRAY_MEASURES)
def test_identical_is_one(measure, a):
    assert measure(a, a.copy()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("measure", ARRAY_MEASURES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_is_zero(measure, bad):
    a = np.ones(4, np.float32)
    b = a.copy()
    b[2] = bad
    assert measure(a, b) == 0.0
    assert measure(b, b) == 0.0


@pytest.mark.parametrize("measure", ARRAY_MEASURES)
def test_shape_mismatch_is_zero(measure):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert measure(a, a.reshape(3, 2)) == 0.0
    assert measure(a, a[:, :2]) == 0.0


def test_tensor_catches_uniform_scaling_that_cosine_misses():
    a = np.random.default_rng(0).standard_normal(64)
    assert tensor_similarity(a, 2 * a) == pytest.approx(math.sqrt(0.5), rel=1e-6)
    assert tensor_similarity(a, -a) == 0.0


def test_tensor_zero_arrays():
    assert tensor_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert tensor_similarity(np.zeros(3), np.ones(3)) == 0.0


def test_distributional_ignores_shift_but_not_temperature():
    logits = np.random.default_rng(1).standard_normal((3, 10))
    assert distributional_similarity(logits, logits + 5.0) == pytest.approx(1.0, abs=1e-6)
    assert distributional_similarity(logits, logits * 3.0) < 0.9


def test_float32_promotion():
    # A float64 difference below float32 resolution is not a difference.
    assert scalar_similarity(1.0, 1.0 + 1e-12) == 1.0
    assert exact_agreement(np.float64(1.0 + 1e-12), 1.0) == 1.0


def test_scalar_reaches_zero_at_own_magnitude():
    assert scalar_similarity(1.0, 3.0) == 0.0
    assert scalar_similarity(1.0, 1.1) == pytest.approx(1 - 0.2 / 2.1, rel=1e-6)


def test_banded_scalar():
    assert banded_scalar_similarity(1.0, 1.05, band=0.1) == 1.0
    assert banded_scalar_similarity(1.0, 1.3, band=0.1) == pytest.approx(
        1 - 2 * 0.2 / 2.3, rel=1e-5
    )
    assert banded_scalar_similarity(1.0, 1.3, band=0.0) == scalar_similarity(1.0, 1.3)
    assert banded_scalar_similarity(1.0, 1.0, band=-1.0) == 0.0
    assert banded_scalar_similarity(1.0, 1.0, band=float("nan")) == 0.0


def test_exact_agreement_discrete_and_nested():
    assert exact_agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert exact_agreement("abc", "abc") == 1.0
    assert exact_agreement("abc", "abd") == 0.0
    assert exact_agreement(["a", "b"], ["a", "c"]) == 0.5
    assert exact_agreement([1, 2], [1, 2, 3]) == 0.0
    assert exact_agreement({"k": 1}, {"k": 1}) == 1.0
    assert exact_agreement(1, "1") == 0.0
