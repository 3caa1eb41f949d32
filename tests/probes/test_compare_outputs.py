from __future__ import annotations

import numpy as np
import pytest

from evidence_store import numbers
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


def test_the_noise_is_measured_in_float64_not_after_rounding_both_runs_to_float32():
    """A float32 loss agrees with its float64 run to a fraction of a float32 step: that fraction is its noise."""
    exact = 1.0 / 3.0
    loss = np.float32(exact)
    assert float(np.float32(exact)) == float(loss)  # rounded to float32, the two runs would agree: noise 0
    leaf = compare_leaf("loss", "scalar", loss, loss, exact)
    assert leaf.noise == pytest.approx(2 * abs(float(loss) - exact) / (float(loss) + exact), rel=1e-6)
    assert 0.0 < leaf.noise < RESOLUTION and leaf.tolerance == pytest.approx(SPREAD * RESOLUTION) and leaf.ok
    tensor = compare_leaf("y", "tensor", X, X, X.astype(np.float64) / 3 * 3 + 1e-12)
    assert tensor.noise > 0.0  # the same for a tensor: float64 differences below a float32 step still count
    banded = compare_leaf("loss", "banded", loss, loss, exact)
    assert banded.noise == pytest.approx(leaf.noise)


def test_a_leaf_the_noise_run_lacks_is_marked_unmeasured():
    out = compare_outputs(side(y=X, z=X), side(y=X, z=X), side(y=X.astype(np.float64)))
    by_path = {leaf.path: leaf.as_dict() for leaf in out.leaves}
    assert by_path["z"]["noise"] == 0.0 and by_path["z"]["noise_measured"] is False
    assert "noise_measured" not in by_path["y"]


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


@pytest.mark.parametrize(
    ("ref", "cand", "said"),
    [
        (X, 1.5, "a float number where the reference has a float32 array of shape (3, 4)"),
        (
            np.array([1.5], dtype=np.float32),
            1.5,
            "a float number where the reference has a float32 array of shape (1,)",
        ),
        (
            1.5,
            np.array([1.5], dtype=np.float32),
            "a float32 array of shape (1,) where the reference has a float number",
        ),
        (1.5, "1.5", "a string where the reference has a float number"),
        (3, 3.0, "a float number where the reference has an int number"),
        (True, 1, "an int number where the reference has a bool number"),
        ("cat", None, "None where the reference has a string"),
    ],
)
def test_a_leaf_of_another_data_kind_or_shape_is_violated_naming_both(ref, cand, said):
    out = compare_outputs(side(y=ref), side(y=cand), side(y=ref))
    assert out.structure == [f"y: {said}"]
    assert not out.consistent and out.leaves == []


def test_a_mapping_where_the_reference_has_an_array_is_violated_naming_both():
    ref = side(y=X)
    cand = SideOutput({**side(y=X).manifest, "y": {"kind": "mapping", "type": "dict", "keys": ["a"]}}, {})
    assert compare_structure(ref, cand) == ["y: a mapping where the reference has a float32 array of shape (3, 4)"]
    assert compare_structure(cand, ref) == ["y: a float32 array of shape (3, 4) where the reference has a mapping"]


def test_a_non_finite_float_is_still_a_float():
    out = compare_outputs(side(loss=1.5), side(loss="nan"), side(loss=1.5))
    assert out.structure == [] and not out.consistent


@pytest.mark.parametrize(
    ("leaves", "measures", "said"),
    [
        ({"y": X}, {"logit": "tensor"}, "compare names 'logit', which is no output of the reference (outputs: y)"),
        (
            {"y": 1.5},
            {"y": "distributional"},
            "distributional needs a float array of logits [..., classes], not a float number",
        ),
        ({"y": np.arange(3)}, {"y": "distributional"}, "not an int64 array"),
        (
            {"y": "cat"},
            {"*": "tensor"},
            "compare names tensor for y: tensor needs numbers (an array or a number), not a string",
        ),
        ({"y": None}, {"y": "banded"}, "banded needs numbers"),
    ],
)
def test_a_measure_that_names_nothing_or_does_not_fit_the_data_is_refused(leaves, measures, said):
    ref = side(**leaves)
    with pytest.raises(ValueError) as caught:
        compare_outputs(ref, ref, ref, measures)
    assert said in str(caught.value)


def test_fitting_measures_are_accepted():
    ref = side(y=X, n=3, s="cat", loss=1.5)
    out = compare_outputs(ref, ref, ref, {"y": "distributional", "n": "scalar", "s": "exact", "loss": "banded"})
    assert out.consistent and {leaf.measure for leaf in out.leaves} == {"distributional", "scalar", "exact", "banded"}


def test_a_banded_output_keeps_its_largest_difference_in_the_bands_units():
    ref, noise = side(val=np.array([2.0, 3.0])), side(val=np.array([2.01, 3.0]))
    out = compare_outputs(ref, side(val=np.array([2.0, 3.5])), noise, {"val": "banded"})
    (leaf,) = out.leaves
    assert not leaf.ok and leaf.difference == pytest.approx(0.5)
    assert leaf.as_dict()["difference"] == pytest.approx(0.5)
    assert out.failing() == [f"val: banded, largest difference 0.5 > band {numbers.tolerance(leaf.tolerance)}"]
    mismatched = compare_outputs(ref, side(val=np.array([2.0])), noise, {"val": "banded"})
    assert all(leaf.difference is None for leaf in mismatched.leaves)


def test_a_failing_output_reads_as_a_failure_with_how_far_out_never_a_score():
    ref = side(y=X)
    noise = side(y=X.astype(np.float64) * (1 + 1e-9))
    close = compare_outputs(ref, side(y=X * (1 + 2e-4)), noise)
    (leaf,) = close.leaves
    assert not leaf.ok and leaf.score > 0.9995  # three digits would read 1.0
    (line,) = close.failing()
    distance, tolerance = 1 - leaf.score, leaf.tolerance
    assert line == (
        f"y: {leaf.measure} fails: distance {numbers.distance(distance)} > tolerance {numbers.tolerance(tolerance)}"
        f" ({numbers.significant(distance / tolerance, 3)}× the tolerance)"
    )
    assert "score" not in line and float(line.split("(")[1].split("×")[0]) > 1


def test_a_failure_against_a_zero_tolerance_has_no_ratio():
    from probes.compare import LeafScore, _failing_line

    leaf = LeafScore(path="n", measure="exact", score=0.0, noise=0.0, tolerance=0.0, ok=False)
    assert _failing_line(leaf) == "n: exact fails: distance 1.0 > tolerance 0.0"
