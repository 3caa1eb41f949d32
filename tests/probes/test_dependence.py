"""Whether a probe's compared output came from its component: the counterfactual reference run, end to end."""

from __future__ import annotations

import numpy as np
import pytest
from probe_fixtures import FIXTURES

from evidence_store.records import Outcome
from probes import dependence
from probes.compare import SideOutput
from probes.context import make_context
from probes.differential import probe_file_probe
from task_model.loader import load_task

SHOP = FIXTURES / "shop"
PROBES = FIXTURES / "probe_counterfactual.py"


def _results(workdir, cache=None) -> dict:
    ctx = make_context(
        load_task(SHOP), SHOP / "solution" / "app", sandbox_kind="none", workdir=workdir, reference_cache=cache
    )
    return {r.property.id: r for r in probe_file_probe(str(PROBES))(ctx)}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("shop")
    return _results(root / "work", root / "cache")


def test_every_probe_compares_equal_outputs(results):
    assert {pid: r.outcome for pid, r in results.items()} == dict.fromkeys(results, Outcome.ESTABLISHED)


@pytest.mark.parametrize(
    ("pid", "said"),
    [
        ("shop.affine", "changed"),  # an array
        ("shop.label", "changed"),  # a string
        ("shop.center", "changed"),  # a procedure that returns nothing: its stand-in does nothing
        ("shop.counter", "changed"),  # a class: its instance's numbers and its method's result
        ("shop.scorer", "stopped"),  # a function it returned: poisoned, and the probe used it
        ("shop.summary", "stopped"),  # a file it wrote: its moved result changes nothing, its absence stops
    ],
)
def test_a_reference_whose_output_comes_from_its_component_is_not_marked(results, pid, said):
    run = results[pid].reference_run
    assert run.counterfactual == said and run.reason == ""
    assert results[pid].reimplemented == [] and run.ran == [results[pid].context["component"]]


@pytest.mark.parametrize(
    "pid", ["shop.affine.dropped", "shop.label.dropped", "shop.center.dropped", "shop.scorer.dropped"]
)
def test_a_reference_that_calls_its_component_and_drops_the_result_is_marked(results, pid):
    run = results[pid].reference_run
    assert run.ran == [results[pid].context["component"]]  # it did enter the component
    assert run.counterfactual == "unchanged" and run.reason == "unchanged"
    assert results[pid].reimplemented == [results[pid].context["component"]]
    assert results[pid].open_on_interface == results[pid].reimplemented  # the instruction names them


def test_a_reference_that_removes_the_profile_hook_gets_no_mark_that_it_ran(results):
    result = results["shop.affine.unhooked"]
    assert result.reference_run.ran == [] and result.reference_run.reason == "trace disturbed"
    assert result.reimplemented == ["shop.affine"]


def test_a_reference_that_edits_the_trace_to_say_its_component_ran_is_not_believed(results):
    run = results["shop.affine.forged"].reference_run
    assert run.ran == ["shop.affine"]  # the record it forged
    assert run.counterfactual == "unchanged" and results["shop.affine.forged"].reimplemented == ["shop.affine"]


def test_the_counterfactual_run_is_kept_with_the_reference(tmp_path):
    cache = tmp_path / "cache"
    first = _results(tmp_path / "a", cache)
    runs = sorted(p.parent.parent.name for p in cache.glob(f"*/*/{dependence.OUT}/manifest.json"))
    assert "dropped" in runs and "kept" in runs and "unhooked" not in runs  # only where the trace is believed
    skipped = {p.parent.parent.name for p in cache.glob(f"*/*/{dependence.SKIP_OUT}/*.json")}
    # a procedure goes straight to doing nothing; the rest only where moving its values moved no output
    assert "center" in skipped and "center" not in runs
    assert {"dropped", "summary"} <= skipped and "kept" not in skipped and "label" not in skipped
    again = _results(tmp_path / "b", cache)
    assert len(list(cache.glob("*/done"))) == 1
    assert {p: r.reference_run.model_dump() for p, r in again.items()} == {
        p: r.reference_run.model_dump() for p, r in first.items()
    }


def _output(**values) -> SideOutput:
    manifest, arrays = {}, {}
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            arrays[f"a{len(arrays)}"] = value
            manifest[name] = {
                "kind": "array",
                "shape": list(value.shape),
                "dtype": str(value.dtype),
                "key": f"a{len(arrays) - 1}",
            }
        else:
            manifest[name] = {"kind": "value", "value": value}
    return SideOutput(manifest, arrays)


def test_outputs_are_the_same_within_a_reruns_last_digits_and_differ_beyond():
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    assert dependence.same_outputs(_output(y=x, n=3), _output(y=x * (1 + 1e-7), n=3))
    assert dependence.same_outputs(_output(y=np.array([np.nan, 1.0])), _output(y=np.array([np.nan, 1.0])))
    assert not dependence.same_outputs(_output(y=x), _output(y=x * -1.5 + 0.25))
    assert not dependence.same_outputs(_output(y=x, n=3), _output(y=x, n=10))
    assert not dependence.same_outputs(_output(y=x), _output(y=x, n=3))  # an output more
    assert not dependence.same_outputs(_output(y=x), _output(y=x[:2]))
    assert not dependence.same_outputs(_output(y=np.arange(3)), _output(y=np.arange(3) + 7))


def test_the_verdict_of_a_failed_or_empty_counterfactual_run():
    first = {"ok": True, "output": _output(y=np.ones(2)), "report": {}}
    assert dependence.verdict(first, None) is None
    assert dependence.verdict(first, {"ok": False, "blame": "probe", "trace": "CounterfactualValue"}) == "stopped"
    empty = {"ok": True, "output": _output(y=np.ones(2)), "report": {"counterfactual": {"stand_ins": 0}}}
    assert dependence.verdict(first, empty) == "unchecked"  # nothing got a stand-in: the run says nothing
    assert dependence.verdict(first, {**empty, "report": {"counterfactual": {"stand_ins": 1}}}) == "unchanged"


def test_only_what_a_module_of_the_original_holds_gets_a_counterfactual_run():
    source = SHOP / "environment" / "source"
    assert dependence.original_member(source, "shop.affine")
    assert dependence.original_member(source, "shop.Counter.add")
    assert not dependence.original_member(source, "shop")  # a module: nothing to stand in for
    assert not dependence.original_member(source, "converter")  # only the candidate has it
    assert not dependence.original_member(source, "numpy.tanh")
