from __future__ import annotations

import numpy as np
import pytest

from probes.compare import (
    RESOLUTION,
    SPREAD,
    SideOutput,
    compare_leaf,
    compare_outputs,
    compare_structure,
)


def side(**leaves) -> SideOutput:
    manifest, arrays = {"": {"kind": "mapping", "type": "dict", "keys": list(leaves)}}, {}
    for name, value in leaves.items():
        if isinstance(value, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = value
            manifest[name] = {
                "kind": "array",
                "shape": list(value.shape),
                "dtype": str(value.dtype),
                "key": key,
            }
        else:
            manifest[name] = {"kind": "value", "value": value}
    return SideOutput(manifest, arrays)


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def test_identical_outputs_are_consistent():
    out = compare_outputs(side(y=X), side(y=X.copy()), side(y=X.astype(np.float64)))
    assert out.consistent and out.score == pytest.approx(1.0)


def test_tolerance_follows_reference_noise():
    noisy_ref = X.astype(np.float64) * (1 + 1e-3)
    # A candidate as far off as the reference's own noise passes; ten times more fails.
    near = compare_outputs(side(y=X), side(y=X * (1 + 5e-3)), side(y=noisy_ref))
    far = compare_outputs(side(y=X), side(y=X * (1 + 5e-2)), side(y=noisy_ref))
    assert near.consistent
    assert not far.consistent
    assert far.noise_floor == pytest.approx(near.noise_floor)


def test_resolution_floor_when_reference_has_no_noise():
    leaf = compare_leaf("y", "tensor", X, X * (1 + 5e-7), X)
    assert leaf.noise == pytest.approx(0.0, abs=1e-12)
    assert leaf.tolerance == pytest.approx(SPREAD * RESOLUTION)
    assert leaf.ok
    assert not compare_leaf("y", "tensor", X, X * 1.01, X).ok


def test_structure_problems():
    ref = side(y=X, labels=np.arange(3), name="a")
    cand = side(y=X.T.copy(), labels=np.arange(3).astype(np.float32))
    problems = compare_structure(ref, cand)
    assert any("y: shape (4, 3)" in p for p in problems)
    assert any("labels: dtype float32" in p for p in problems)
    assert any("name: missing" in p for p in problems)
    assert any("fields ['name'] missing" in p for p in problems)
    out = compare_outputs(ref, cand, ref)
    assert not out.consistent and out.score < 0.5


def test_number_versus_zero_d_array_is_not_a_mismatch():
    ref = side(loss=1.5)
    cand = side(loss=np.array(1.5, dtype=np.float32))
    assert compare_structure(ref, cand) == []
    assert compare_outputs(ref, cand, ref).consistent


def test_exact_outputs_allow_only_reference_disagreement():
    ref = side(tokens=np.array([1, 2, 3, 4]))
    assert compare_outputs(ref, side(tokens=np.array([1, 2, 3, 4])), ref).consistent
    assert not compare_outputs(ref, side(tokens=np.array([1, 2, 3, 5])), ref).consistent
    shaky = side(tokens=np.array([1, 2, 0, 4]))
    assert compare_outputs(ref, side(tokens=np.array([1, 2, 3, 5])), shaky).consistent


def test_banded_measure_uses_reference_spread():
    ref, noise = side(val=2.0), side(val=2.01)
    assert compare_outputs(ref, side(val=2.05), noise, {"val": "banded"}).consistent
    out = compare_outputs(ref, side(val=2.5), noise, {"val": "banded"})
    assert not out.consistent and out.leaves[0].score < 1.0


def test_glob_measures_and_unknown_measure():
    ref = side(**{"logits": X})
    out = compare_outputs(ref, side(logits=X + 3.0), ref, {"log*": "distributional"})
    assert out.leaves[0].measure == "distributional" and out.consistent
    with pytest.raises(ValueError, match="unknown measure"):
        compare_outputs(ref, ref, ref, {"logits": "cosine"})


def test_nan_in_candidate_is_violated():
    bad = X.copy()
    bad[0, 0] = np.nan
    out = compare_outputs(side(y=X), side(y=bad), side(y=X))
    assert not out.consistent and out.score == 0.0


def test_outputs_the_reference_cannot_reproduce_are_uninformative():
    rng = np.random.default_rng(0)
    ref, again = side(y=rng.standard_normal(20), z=X), side(y=rng.standard_normal(20), z=X)
    out = compare_outputs(ref, side(y=rng.standard_normal(20), z=X), again)
    assert [leaf.path for leaf in out.informative] == ["z"]
    assert out.consistent and out.score == pytest.approx(1.0)
    assert out.leaves[0].as_dict()["informative"] is False
