from __future__ import annotations

import shutil

import pytest
from probe_fixtures import CANDIDATES, FIXTURES, TINY

from evidence_store.records import Outcome
from probes.context import make_context
from probes.differential import differential_probe, probe_file_probe
from probes.probe_format import ProbeFileError, probe_names
from task_model.loader import load_task

NUMPY_PROBES = FIXTURES / "probe_numpy.py"
PLAIN = FIXTURES / "plain"
"""A task whose original is numpy alone (its probes run the original without importing torch)."""


def _run(candidate: str, tmp_path, probe_file=NUMPY_PROBES):
    ctx = make_context(load_task(TINY), CANDIDATES / candidate, sandbox_kind="none", workdir=tmp_path / "work")
    return {r.property.id: r for r in probe_file_probe(str(probe_file))(ctx)}


@pytest.fixture(scope="module")
def good_results(tmp_path_factory):
    return _run("good", tmp_path_factory.mktemp("good"))


@pytest.fixture(scope="module")
def wrong_results(tmp_path_factory):
    return _run("wrong", tmp_path_factory.mktemp("wrong"))


def test_good_candidate_is_established_with_noise_floor(good_results):
    for pid in ("np.affine", "np.net", "np.labels"):
        result = good_results[pid]
        assert result.outcome is Outcome.ESTABLISHED, (pid, result.observations, result.trace)
        assert 0.999 < result.score <= 1.0
        assert "noise_floor" in result.observations
    assert good_results["np.affine"].context["noise_source"] == "float64"
    assert good_results["np.affine"].observations["noise_floor"] > 0
    assert good_results["np.labels"].context["noise_source"] == "rerun"
    # the source travels with the outputs, where a reader of the stored evidence (no contexts) finds it
    assert [good_results[p].observations["noise_source"] for p in ("np.affine", "np.labels")] == ["float64", "rerun"]
    assert good_results["np.net"].observations["outputs"]["stats/shape"]["measure"] == "exact"


def test_results_carry_what_reruns_them(good_results):
    result = good_results["np.affine"]
    assert result.context["rerun"] == {
        "factory": "probes.differential:differential_probe",
        "options": {"path": str(NUMPY_PROBES), "name": "affine"},
    }
    assert result.context["inputs"]["x"] == {"shape": [5, 4], "dtype": "float32"}
    assert result.context["component"] == "model.Affine"
    assert result.context["seed"] == 0


def test_wrong_candidate_is_violated(wrong_results):
    result = wrong_results["np.affine"]
    assert result.outcome is Outcome.VIOLATED
    assert result.score < 0.9
    assert "y: tensor fails: distance" in result.observations["message"]
    assert wrong_results["np.net"].outcome is Outcome.VIOLATED


def test_misfit_calling_convention_is_not_established_with_trace(good_results, wrong_results):
    for results in (good_results, wrong_results):
        result = results["np.misfit"]
        assert result.outcome is Outcome.NOT_ESTABLISHED
        assert "AttributeError" in result.trace and "Net" in result.trace
        assert "calling convention" in result.observations["message"]


def test_crash_in_candidate_code_is_violated(tmp_path):
    results = _run("crashy", tmp_path)
    result = results["np.affine"]
    assert result.outcome is Outcome.VIOLATED
    assert "ValueError" in result.trace or "matmul" in result.trace


def test_candidate_importing_torch_is_violated(tmp_path):
    result = _run("torchy", tmp_path)["np.affine"]
    assert result.outcome is Outcome.VIOLATED
    assert "torch" in result.trace
    assert result.observations["forbidden_imports"][0]["module"] == "torch"


def test_structure_mismatch_is_violated(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    text = (cand / "model.py").read_text()
    (cand / "model.py").write_text(text + "\n\ndef _unused():\n    pass\n")
    probe = tmp_path / "shape_probe.py"
    probe.write_text(
        "def reference(env):\n    import numpy as np\n    return {'y': np.zeros((2, 3)), 'meta': {'k': 1}}\n\n"
        "def candidate(env):\n    import numpy as np\n    return {'y': np.zeros((3, 2)), 'meta': {'j': 1}}\n"
    )
    ctx = make_context(load_task(TINY), cand, sandbox_kind="none", workdir=tmp_path / "work")
    (result,) = differential_probe(str(probe))(ctx)
    assert result.outcome is Outcome.VIOLATED
    assert any("shape (3, 2)" in s for s in result.observations["structure"])
    assert any("fields ['k'] missing" in s for s in result.observations["structure"])
    assert result.score == 0.0


def test_reference_failure_is_not_established(tmp_path):
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path / "work")
    (result,) = differential_probe(str(FIXTURES / "probe_broken_reference.py"))(ctx)
    assert result.outcome is Outcome.NOT_ESTABLISHED
    assert "reference side failed" in result.observations["message"]
    assert "DoesNotExist" in result.trace


@pytest.mark.slow
def test_real_torch_reference_against_numpy_candidate(tmp_path):
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path / "work")
    (result,) = differential_probe(str(FIXTURES / "probe_tiny.py"), "net")(ctx)
    assert result.outcome is Outcome.ESTABLISHED, (result.observations, result.trace)
    assert result.context["noise_source"] == "float64"
    assert 0 < result.observations["noise_floor"] < 1e-5
    assert result.reference_run.ran == ["model.Net"] and result.reimplemented == []
    called = {(c.name, c.caller) for c in result.reference_run.calls}
    assert ("torch.nn.Linear", "model.Affine.__init__") in called  # the original's calls into torch, named


def test_a_probe_whose_reference_re_implements_its_component_is_marked_and_one_that_runs_it_is_not(tmp_path):
    ctx = make_context(load_task(PLAIN), PLAIN / "solution" / "app", sandbox_kind="none", workdir=tmp_path / "w")
    results = {r.property.id: r for r in probe_file_probe(str(FIXTURES / "probe_reimplemented.py"))(ctx)}
    assert {pid: r.outcome for pid, r in results.items()} == dict.fromkeys(
        ("calc.affine", "calc.affine.copy", "calc.net"), Outcome.ESTABLISHED
    )
    own, copy, composed = results["calc.affine"], results["calc.affine.copy"], results["calc.net"]
    assert own.reference_run.ran == ["calc.affine"] and own.reimplemented == []
    # the same component, computed by the probe's own copy of it: marked, and on the instruction's interface
    assert copy.reference_run.ran == [] and copy.reimplemented == ["calc.affine"]
    assert copy.open_on_interface == ["calc.affine"]
    # what it `uses` is recorded, and marks nothing (often only the candidate side needs it: a converter)
    assert composed.reference_run.ran == ["calc.net", "calc.affine"]
    assert composed.reference_run.uses_not_ran == ["calc.unused"] and composed.reimplemented == []


def test_a_numpy_copy_of_a_torch_component_is_marked_and_a_probe_naming_none_is_not_traced(good_results):
    # the numpy fixture names `model.Affine`, a torch module its reference never imports
    assert good_results["np.affine"].reimplemented == ["model.Affine"]
    assert good_results["np.misfit"].reference_run is None  # a probe that names no component is not traced


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def reference(env):\n    return {}\n", "no matching candidate"),
        ("def candidate_x(env):\n    return {}\n", "no matching reference_x"),
        ("x = 1\n", "defines no probe"),
        ("def reference(:\n", "invalid syntax"),
        (
            "PROBES = dict(a=1)\ndef reference(env): pass\ndef candidate(env): pass\n",
            "literal dict",
        ),
    ],
)
def test_bad_probe_files_are_refused(tmp_path, text, message):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ProbeFileError, match=message):
        probe_names(path)


def test_probe_names_reads_metadata_without_running(tmp_path):
    path = tmp_path / "meta.py"
    shutil.copy(NUMPY_PROBES, path)
    names = probe_names(path)
    assert set(names) == {"affine", "net", "misfit", "labels"}
    assert names["affine"]["component"] == "model.Affine"
    assert set(probe_names(path, checks=True)) == {"ok", "bad", "misfit", "nothing"}


def test_a_probe_file_s_probes_come_in_name_order_whatever_the_order_of_its_functions(tmp_path):
    path = tmp_path / "order.py"
    pairs = "".join(f"def reference_{n}(env):\n    pass\n\ndef candidate_{n}(env):\n    pass\n\n" for n in "zqa")
    path.write_text(pairs + "".join(f"def check_{n}(env):\n    pass\n\n" for n in "ymb"))
    assert list(probe_names(path)) == ["a", "q", "z"]
    assert list(probe_names(path, checks=True)) == ["b", "m", "y"]


def test_reference_cache_is_reused_across_candidates(tmp_path):
    cache = tmp_path / "cache"
    first = make_context(
        load_task(TINY),
        CANDIDATES / "good",
        sandbox_kind="none",
        workdir=tmp_path / "a",
        reference_cache=cache,
    )
    (good,) = differential_probe(str(NUMPY_PROBES), "affine")(first)
    assert len(list(cache.glob("*/done"))) == 1
    second = make_context(
        load_task(TINY),
        CANDIDATES / "wrong",
        sandbox_kind="none",
        workdir=tmp_path / "b",
        reference_cache=cache,
    )
    (wrong,) = differential_probe(str(NUMPY_PROBES), "affine")(second)
    assert not list((tmp_path / "b" / "probes").glob("*/reference.json"))
    assert good.outcome is Outcome.ESTABLISHED and wrong.outcome is Outcome.VIOLATED
    assert wrong.observations["noise_floor"] == good.observations["noise_floor"]


RESEED_PROBE = '''
PROBES = {
    "mask_same": {"id": "drop.rerun", "compare": {"kept": "banded"}, "noise": "rerun"},
    "mask_reseed": {"id": "drop.reseed", "compare": {"kept": "banded"}, "noise": "reseed"},
    "mask_wrong": {"id": "drop.wrong", "compare": {"kept": "banded"}, "noise": "reseed"},
}
import numpy as np


def _kept(seed, rate):  # a dropout mask's kept share: its own generator, as each framework has
    return float((np.random.default_rng(seed).random(4000) >= rate).mean())


def reference_mask_same(env):
    return {"kept": _kept(env.seed, 0.1)}


def candidate_mask_same(env):
    return {"kept": _kept(env.seed + 1000, 0.1)}  # same rate, other draws


def reference_mask_reseed(env):
    return {"kept": _kept(env.seed, 0.1)}


def candidate_mask_reseed(env):
    return {"kept": _kept(env.seed + 1000, 0.1)}


def reference_mask_wrong(env):
    return {"kept": _kept(env.seed, 0.1)}


def candidate_mask_wrong(env):
    return {"kept": _kept(env.seed + 1000, 0.5)}  # the wrong rate
'''


def test_a_reseeded_noise_floor_lets_random_statistics_compare_across_generators(tmp_path):
    probe = tmp_path / "drop.py"
    probe.write_text(RESEED_PROBE)
    results = _run("good", tmp_path, probe)
    # the same seed twice has no spread: a correct dropout whose draws differ cannot pass
    assert results["drop.rerun"].outcome is Outcome.VIOLATED
    reseeded = results["drop.reseed"]
    assert reseeded.outcome is Outcome.ESTABLISHED, reseeded.observations
    assert reseeded.context["noise_source"] == "reseed" and reseeded.observations["noise_floor"] > 0
    assert results["drop.wrong"].outcome is Outcome.VIOLATED  # a wrong rate is far outside the band


KINDS_PROBE = """
PROBES = {"kinds": {"id": "kinds"}, "misfit": {"id": "misfit", "compare": {"label": "distributional"}}}


def reference_kinds(env):
    return {"y": [1.5, 2.0], "n": 3, "stats": {"norm": 1.0}}


def candidate_kinds(env):
    return {"y": 1.5, "n": 3.0, "stats": 1.0}


def reference_misfit(env):
    return {"label": "cat"}


def candidate_misfit(env):
    return {"label": "cat"}
"""


def test_outputs_of_another_data_kind_are_violated_and_a_misfit_measure_is_not_established(tmp_path):
    path = tmp_path / "kinds.py"
    path.write_text(KINDS_PROBE)
    results = _run("good", tmp_path, probe_file=path)
    kinds, misfit = results["kinds"], results["misfit"]
    assert kinds.outcome is Outcome.VIOLATED
    assert sorted(kinds.observations["structure"]) == [
        "n: a float number where the reference has an int number",
        "stats/norm: missing in the candidate's output",
        "stats: a float number where the reference has a mapping",
        "y: a float number where the reference has a float64 array of shape (2,)",
    ]
    assert misfit.outcome is Outcome.NOT_ESTABLISHED
    assert misfit.observations["message"] == (
        "bad probe metadata: compare names distributional for label: distributional needs a float array "
        "of logits [..., classes], not a string"
    )


def test_a_reference_run_without_its_trace_or_with_a_disturbed_one_is_not_believed(tmp_path):
    from probes.differential import reference_run_of

    ctx = make_context(load_task(PLAIN), PLAIN / "solution" / "app", sandbox_kind="none", workdir=tmp_path / "w")
    meta = {"component": "calc.affine", "uses": ["calc.unused"]}
    missing = reference_run_of(ctx, meta, {"outputs": {}})  # e.g. a probe that wrote its own manifest
    assert (missing.not_ran, missing.reason) == (["calc.affine"], "trace missing")
    assert missing.on_interface == ["calc.affine"]
    said = {"ran": {"calc.affine": True, "calc.unused": False}, "intact": False}
    disturbed = reference_run_of(ctx, meta, {"reference_trace": said})
    assert (disturbed.ran, disturbed.not_ran, disturbed.reason) == ([], ["calc.affine"], "trace disturbed")
    believed = reference_run_of(ctx, meta, {"reference_trace": {**said, "intact": True}}, "changed")
    assert (believed.ran, believed.not_ran, believed.counterfactual) == (["calc.affine"], [], "changed")
    assert believed.uses_not_ran == ["calc.unused"]
    unchanged = reference_run_of(ctx, meta, {"reference_trace": {**said, "intact": True}}, "unchanged")
    assert (unchanged.not_ran, unchanged.reason) == (["calc.affine"], "unchanged")
