from __future__ import annotations

from probe_fixtures import CANDIDATES, TINY

from evidence_store.records import Outcome, ProbeResult, Property
from probes.context import make_context
from probes.localize import localize_divergence, module_graph


def _result(pid: str, outcome: Outcome, component: str | None, level: int = 1) -> ProbeResult:
    return ProbeResult(
        property=Property(id=pid, kind="differential", level=level),
        outcome=outcome,
        context={"component": component} if component else {},
    )


def test_module_graph_of_the_tiny_source():
    graph = module_graph(TINY / "environment" / "source")
    assert graph.has_edge("model.Net", "model.Affine")
    assert graph.has_edge("train.train", "model.Net")
    assert graph.has_edge("train.train", "model.loss_fn")
    assert graph.nodes["model.Affine"]["kind"] == "class"
    assert graph.nodes["train"]["kind"] == "module"
    assert graph.has_edge("model.Affine", "model")


def test_first_divergent_component_is_the_lowest_violated(tmp_path):
    ctx = make_context(TINY, CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    results = [
        _result("run", Outcome.VIOLATED, "train.train", 3),
        _result("net", Outcome.VIOLATED, "model.Net", 2),
        _result("affine", Outcome.VIOLATED, "model.Affine", 1),
        _result("loss", Outcome.ESTABLISHED, "model.loss_fn", 1),
    ]
    found = localize_divergence(ctx, results)
    assert found is not None and found.outcome is Outcome.VIOLATED
    assert found.observations["component"] == "model.Affine"
    assert found.observations["violated_components"][0] == "model.Affine"


def test_divergence_above_established_leaves(tmp_path):
    ctx = make_context(TINY, CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    results = [
        _result("run", Outcome.VIOLATED, "train.train", 3),
        _result("net", Outcome.ESTABLISHED, "model.Net", 2),
        _result("affine", Outcome.ESTABLISHED, "Affine", 1),
        _result("other", Outcome.NOT_ESTABLISHED, "model.loss_fn", 1),
    ]
    found = localize_divergence(ctx, results)
    assert found.observations["component"] == "train.train"
    assert "model.Net" in found.observations["established_below"]
    assert "model.Affine" in found.observations["established_below"]


def test_nothing_violated_localizes_nothing(tmp_path):
    ctx = make_context(TINY, CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    assert localize_divergence(ctx, [_result("a", Outcome.ESTABLISHED, "model.Net")]) is None
    assert localize_divergence(ctx, [_result("a", Outcome.VIOLATED, None)]) is None


def test_a_module_that_does_not_import_comes_before_its_definitions(tmp_path):
    ctx = make_context(TINY, CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    results = [
        _result("imports", Outcome.VIOLATED, "model", 0),
        _result("net", Outcome.VIOLATED, "model.Net", 2),
        _result("affine", Outcome.VIOLATED, "model.Affine", 1),
    ]
    assert localize_divergence(ctx, results).observations["component"] == "model"


def test_uses_explains_a_divergence_by_a_shared_helper(tmp_path):
    ctx = make_context(TINY, CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    net = _result("net", Outcome.VIOLATED, "model.Net", 1)
    net.context["uses"] = ["model.loss_fn"]
    results = [net, _result("loss", Outcome.VIOLATED, "model.loss_fn", 1)]
    assert localize_divergence(ctx, results).observations["component"] == "model.loss_fn"
