"""`twin task check` re-runs a sample of a task's references on its original and fails, naming the
quantity, where a frozen reference is no longer what the original gives (beyond the original's own noise)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmark_adapter.grading.check import check_task
from benchmark_adapter.grading.grader import Grade
from benchmark_adapter.grading.reference_drift import (
    DRIFT_SPREAD,
    check_reference_drift,
    drift_lines,
    sample_entries,
)
from benchmark_adapter.grading.references import record_references
from probes.compare import RESOLUTION, SideOutput, noise_distance
from probes.similarity import MEASURES
from task_model.loader import load_task

TINY = Path(__file__).resolve().parents[2] / "tasks" / "published" / "tiny-net"
requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the reference side runs under bwrap")


def side(**arrays) -> SideOutput:
    """A side's outputs: a mapping of named arrays, as the probe driver writes them."""
    manifest = {"": {"kind": "mapping", "type": "dict", "keys": sorted(arrays)}}
    for i, (name, value) in enumerate(sorted(arrays.items())):
        value = np.asarray(value)
        manifest[name] = {"kind": "array", "key": f"a{i}", "dtype": str(value.dtype), "shape": list(value.shape)}
    return SideOutput(manifest, {f"a{i}": np.asarray(v) for i, (_, v) in enumerate(sorted(arrays.items()))})


def one_ulp_beyond(ref: np.float32, noise: float) -> tuple[np.float32, np.float32]:
    """The last float32 above `ref` within its drift tolerance, and the first beyond it."""
    tolerance = DRIFT_SPREAD * max(noise, RESOLUTION)
    inside = ref
    while True:
        step = np.nextafter(inside, np.float32(np.inf), dtype=np.float32)
        if 1.0 - MEASURES["scalar"](ref, step) > tolerance:
            return inside, step
        inside = step


def test_a_frozen_value_one_ulp_beyond_its_noise_is_named_and_one_within_is_not():
    ref = np.float32(2.345678)
    noise_run = np.float64(ref) * (1.0 + 3e-7)  # the float64 run: the reference's own noise
    noise = noise_distance("scalar", ref, noise_run)
    inside, beyond = one_ulp_beyond(ref, noise)
    assert inside != ref  # the noise leaves room: the edit is beyond it, not beyond zero
    weights = np.arange(6, dtype=np.float32)
    now, other = side(loss=ref, w=weights), side(loss=noise_run, w=weights.astype(np.float64))
    measures = {"loss": "scalar"}
    assert drift_lines(now, side(loss=inside, w=weights), other, measures) == []
    lines = drift_lines(now, side(loss=beyond, w=weights), other, measures)
    assert len(lines) == 1 and lines[0].startswith("loss: distance"), lines


def test_a_changed_shape_or_a_missing_output_is_named():
    now = side(loss=np.float32(1.0), w=np.ones(3, np.float32))
    lines = drift_lines(now, side(loss=np.float32(1.0), w=np.ones(4, np.float32)), now, {})
    assert any(line.startswith("w") and "(structure)" in line for line in lines), lines
    lines = drift_lines(now, side(loss=np.float32(1.0)), now, {})
    assert any("w" in line and "(structure)" in line for line in lines), lines


def test_the_sample_is_spread_over_the_matched_probes_and_leaves_checks_out():
    entries = [{"mode": "candidate", "slot": f"p{i}"} for i in range(9)] + [{"mode": "check", "slot": "c"}]
    assert [e["slot"] for e in sample_entries(entries, 3)] == ["p0", "p4", "p8"]
    assert len(sample_entries(entries, 20)) == 9
    assert sample_entries(entries, 1) == [entries[0]]


def test_a_task_without_a_recorded_spec_gets_no_reference_rows(tmp_path):
    task = load_task(Path(__file__).resolve().parents[2] / "tasks" / "t2j-mini" / "mlp-train")
    grades = iter([1.0, 0.0])

    def grade(t, candidate):
        return Grade(task="t", candidate="c", reward=next(grades), returncode=0, duration_s=0.0, sandbox="none")

    result = check_task(task, grade_fn=grade, parallel=False, reference_sample=4)
    assert [row.name for row in result.rows] == ["oracle", "empty candidate"]


@pytest.mark.slow  # records tiny-net's references, then re-runs them three times (about 30 s on two cores)
@requires_bwrap
def test_task_check_fails_naming_a_reference_edited_one_ulp_beyond_its_noise(tmp_path):
    copy = tmp_path / "tiny-net"
    shutil.copytree(TINY, copy)
    task = load_task(copy)
    record_references(task, sandbox="auto", timeout_s=600.0)  # frozen as this machine computes them
    refs = copy / "tests" / "refs" / "tiny_net.loss_grads"

    def grade(t, candidate):
        reward = 0.0 if not any(Path(candidate).iterdir()) else 1.0
        return Grade(task="t", candidate="c", reward=reward, returncode=0, duration_s=0.0, sandbox="none")

    def check():
        return check_task(load_task(copy), grade_fn=grade, parallel=False, reference_sample=4)

    clean = check()
    assert clean.passed, clean.failure_line()
    assert [row.name for row in clean.rows][2:] == ["reference tiny_net.forward", "reference tiny_net.loss_grads"]

    key = json.loads((refs / "ref" / "manifest.json").read_text())["outputs"]["loss"]["key"]
    noise_key = json.loads((refs / "noise" / "manifest.json").read_text())["outputs"]["loss"]["key"]
    arrays = dict(np.load(refs / "ref" / "arrays.npz"))
    loss = np.float32(arrays[key])
    noise = noise_distance("scalar", loss, np.load(refs / "noise" / "arrays.npz")[noise_key])
    inside, beyond = one_ulp_beyond(loss, noise)
    for value, fails in ((inside, False), (beyond, True)):
        np.savez(refs / "ref" / "arrays.npz", **{**arrays, key: np.asarray(value, np.float32)})
        result = check()
        assert result.passed is not fails, result.failure_line()
    assert "reference tiny_net.loss_grads" in result.failure_line() and "loss: distance" in result.failure_line()
    assert [d.probe for d in check_reference_drift(load_task(copy), sandbox="auto", size=1)] == ["tiny_net.forward"]


def test_twin_task_check_prints_and_fails_on_a_drifted_reference(tmp_path, monkeypatch, capsys):
    """The CLI passes --reference-sample on, prints the row and its drifted quantity, and exits non-zero."""
    from benchmark_adapter.grading import check as check_module
    from benchmark_adapter.grading import reference_drift
    from benchmark_adapter.grading.reference_drift import Drift
    from harness.cli.app import main

    copy = tmp_path / "tiny-net"
    shutil.copytree(TINY, copy)
    asked = []

    def drifted(task, *, sandbox, size):
        asked.append(size)
        return [Drift(probe="tiny_net.loss_grads", drifted=["loss: distance 3e-07 > tolerance 2.38e-07"])]

    monkeypatch.setattr(reference_drift, "check_reference_drift", drifted)
    real = check_module.check_task
    grades = iter([1.0, 0.0])

    def no_grading(task, **options):
        def grade(t, candidate):
            return Grade(task="t", candidate="c", reward=next(grades), returncode=0, duration_s=0.0, sandbox="none")

        return real(task, **{**options, "grade_fn": grade, "parallel": False})

    monkeypatch.setattr("harness.cli.task.check_task", no_grading)
    assert main(["task", "check", str(copy), "--no-defects", "--reference-sample", "2"]) != 0
    captured = capsys.readouterr()
    assert asked == [2]
    assert "reference tiny_net.loss_grads: drifted: loss: distance" in " ".join(captured.out.split())
    assert "check failed (reference tiny_net.loss_grads)" in captured.err
