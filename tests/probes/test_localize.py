from __future__ import annotations

from pathlib import Path

import pytest
from probe_fixtures import CANDIDATES, TINY

from benchmark_adapter.grading.sweep import load_defects
from evidence_store.records import Outcome, ProbeResult, Property
from probes.context import make_context
from probes.localize import localization_verdict, localize_divergence, module_graph
from task_model.loader import load_task

MLP = Path(__file__).resolve().parents[2] / "tasks" / "t2j-mini" / "mlp-train"


@pytest.fixture
def tiny_ctx(tmp_path):
    return make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)


@pytest.fixture
def mlp_ctx(tmp_path):
    return make_context(load_task(MLP), MLP / "solution" / "app", sandbox_kind="none", workdir=tmp_path)


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


def test_first_divergent_component_is_the_lowest_violated(tiny_ctx):
    results = [
        _result("run", Outcome.VIOLATED, "train.train", 3),
        _result("net", Outcome.VIOLATED, "model.Net", 2),
        _result("affine", Outcome.VIOLATED, "model.Affine", 1),
        _result("loss", Outcome.ESTABLISHED, "model.loss_fn", 1),
    ]
    found = localize_divergence(tiny_ctx, results)
    assert found is not None and found.outcome is Outcome.VIOLATED
    assert found.observations["component"] == "model.Affine"
    assert found.observations["violated_components"][0] == "model.Affine"


def test_divergence_above_established_leaves(tiny_ctx):
    results = [
        _result("run", Outcome.VIOLATED, "train.train", 3),
        _result("net", Outcome.ESTABLISHED, "model.Net", 2),
        _result("affine", Outcome.ESTABLISHED, "Affine", 1),
        _result("other", Outcome.NOT_ESTABLISHED, "model.loss_fn", 1),
    ]
    found = localize_divergence(tiny_ctx, results)
    assert found.observations["component"] == "train.train"
    assert "model.Net" in found.observations["established_below"]
    assert "model.Affine" in found.observations["established_below"]


def test_nothing_violated_localizes_nothing(tiny_ctx):
    assert localize_divergence(tiny_ctx, [_result("a", Outcome.ESTABLISHED, "model.Net")]) is None
    assert localize_divergence(tiny_ctx, [_result("a", Outcome.VIOLATED, None)]) is None


def test_a_module_that_does_not_import_comes_before_its_definitions(tiny_ctx):
    results = [
        _result("imports", Outcome.VIOLATED, "model", 0),
        _result("net", Outcome.VIOLATED, "model.Net", 2),
        _result("affine", Outcome.VIOLATED, "model.Affine", 1),
    ]
    assert localize_divergence(tiny_ctx, results).observations["component"] == "model"


def test_uses_explains_a_divergence_by_a_shared_helper(tiny_ctx):
    net = _result("net", Outcome.VIOLATED, "model.Net", 1)
    net.context["uses"] = ["model.loss_fn"]
    results = [net, _result("loss", Outcome.VIOLATED, "model.loss_fn", 1)]
    assert localize_divergence(tiny_ctx, results).observations["component"] == "model.loss_fn"


@pytest.mark.parametrize(
    ("found", "wanted", "verdict"),
    [
        # the defective function itself, with or without the package in front
        ("mlp_train.losses.cross_entropy", "losses.cross_entropy", "exact"),
        ("mlp_train.losses.cross_entropy", "mlp_train.losses.cross_entropy", "exact"),
        # the class around a defective method; a definition inside a defective module
        ("mlp_train.model.MLPBlock", "model.MLPBlock.norm", "exact"),
        ("mlp_train.checkpoint.load_checkpoint", "checkpoint", "exact"),
        # a candidate helper the original lacks, under its caller's counterpart
        ("mlp_train.checkpoint.save_checkpoint", "checkpoint.to_state_dict", "counterpart"),
        ("mlp_train.checkpoint.load_checkpoint", "checkpoint.from_state_dict", "counterpart"),
        # the wrong caller of that helper only gets the module
        ("mlp_train.checkpoint.load_checkpoint", "checkpoint.to_state_dict", "module"),
        # a whole module does not name a function in it
        ("mlp_train.model", "model.MLPBlock", "module"),
        ("mlp_train.optim.build_optimizer", "losses.cross_entropy", "no"),
        (None, "losses.cross_entropy", "no"),
    ],
)
def test_localization_verdict_on_the_mlp_task(found, wanted, verdict):
    source = MLP / "environment" / "source"
    oracle = MLP / "solution" / "app"
    assert localization_verdict(found, wanted, source, oracle) == verdict


def _uses(pid: str, outcome: Outcome, component: str, uses: list[str], level: int = 1) -> ProbeResult:
    result = _result(pid, outcome, component, level)
    result.context["uses"] = uses
    return result


def test_methods_are_nodes_used_by_their_class_and_through_self(tmp_path):
    (tmp_path / "net.py").write_text(
        "def helper(x):\n    return x\n\n\n"
        "class Net:\n"
        "    def states(self, x):\n        return [helper(x)]\n\n"
        "    def forward(self, x):\n        return self.states(x)[-1]\n\n"
        "    @classmethod\n    def build(cls):\n        return Net()\n\n\n"
        "def run(x):\n    states = [x]\n    return states\n"
    )
    graph = module_graph(tmp_path)
    assert graph.nodes["net.Net.states"]["kind"] == "method"
    assert graph.has_edge("net.Net", "net.Net.states")
    assert graph.has_edge("net.Net.forward", "net.Net.states")
    assert graph.has_edge("net.Net.states", "net.helper")
    # a method naming its own class does not close a cycle
    assert not graph.has_edge("net.Net.build", "net.Net")
    assert graph.has_edge("net.Net", "net.Net.build")
    # a bare name is a top-level definition or nothing: a local `states` is not the method
    assert not graph.has_edge("net.run", "net.Net.states")


def test_a_function_made_of_a_method_localizes_to_the_method(mlp_ctx):
    results = [
        _result("interface", Outcome.VIOLATED, "mlp_train.model.hidden_states", 0),
        _result("logits", Outcome.VIOLATED, "mlp_train.model.MLPClassifier", 2),
    ]
    found = localize_divergence(mlp_ctx, results)
    assert found.observations["component"] == "mlp_train.model.MLPClassifier.hidden_states"


LOAD, SAVE = "mlp_train.checkpoint.load_checkpoint", "mlp_train.checkpoint.save_checkpoint"


@pytest.mark.parametrize(
    ("outcome", "relied_on", "blamed"),
    [
        # an agreeing probe clears what it relies on
        (Outcome.ESTABLISHED, LOAD, SAVE),
        (Outcome.ESTABLISHED, SAVE, LOAD),
        # a disagreeing one implicates it
        (Outcome.VIOLATED, LOAD, LOAD),
        (Outcome.VIOLATED, SAVE, SAVE),
    ],
)
def test_among_equal_suspects_what_other_probes_rely_on_decides(mlp_ctx, outcome, relied_on, blamed):
    results = [
        _result("load", Outcome.VIOLATED, LOAD),
        _result("save", Outcome.VIOLATED, SAVE),
        _uses("other", outcome, "mlp_train.model.MLPClassifier", [relied_on], level=2),
    ]
    assert localize_divergence(mlp_ctx, results).observations["component"] == blamed


def test_components_on_a_cycle_are_peers_and_the_lower_level_wins(mlp_ctx):
    # the source's loader builds the model; the model probe relies on the loader: a cycle
    results = [
        _uses("model", Outcome.VIOLATED, "mlp_train.model.MLPClassifier", ["mlp_train.checkpoint.load_checkpoint"], 2),
        _uses("load", Outcome.VIOLATED, "mlp_train.checkpoint.load_checkpoint", ["mlp_train.model.MLPClassifier"], 1),
    ]
    found = localize_divergence(mlp_ctx, results)
    assert found.observations["component"] == "mlp_train.checkpoint.load_checkpoint"


@pytest.mark.parametrize("task", ["mlp-train", "llama-lora-sft", "llama-paged-serve"])
def test_every_seeded_defect_names_a_component_of_the_original(task):
    from probes.localize import _qualify

    root = MLP.parent / task
    graph = module_graph(root / "environment" / "source")
    path = MLP.parents[2] / "tests" / "benchmark_adapter" / "defects" / f"{task.replace('-', '_')}.py"
    for defect in load_defects(path):
        name = _qualify(graph, defect.component)
        # a definition of the original, or an attribute of one of its classes
        owner = name.rpartition(".")[0]
        assert name in graph or graph.nodes.get(owner, {}).get("kind") == "class", defect.name


def test_a_passing_candidate_side_check_clears_nothing(mlp_ctx):
    tree = ProbeResult(
        property=Property(id="param_tree", kind="param_tree", level=0),
        outcome=Outcome.ESTABLISHED,
        context={"component": "mlp_train.model.MLPClassifier", "uses": ["mlp_train.checkpoint.load_checkpoint"]},
    )
    results = [
        _result("load", Outcome.VIOLATED, "mlp_train.checkpoint.load_checkpoint"),
        _result("save", Outcome.VIOLATED, "mlp_train.checkpoint.save_checkpoint"),
        _uses("logits", Outcome.VIOLATED, "mlp_train.model.MLPClassifier", ["mlp_train.checkpoint.load_checkpoint"], 2),
        tree,
    ]
    assert localize_divergence(mlp_ctx, results).observations["component"] == "mlp_train.checkpoint.load_checkpoint"


@pytest.mark.parametrize(
    ("train_mode", "eval_mode", "cleared"),
    [("train", "eval", []), ("train", "train", ["model.Affine"]), (None, None, ["model.Affine"]), ("train", None, [])],
)
def test_only_probes_run_the_same_way_agree_below(tiny_ctx, train_mode, eval_mode, cleared):
    step = _result("train_step", Outcome.VIOLATED, "model.Net", 2)
    affine = _result("affine", Outcome.ESTABLISHED, "model.Affine", 1)
    for result, mode in ((step, train_mode), (affine, eval_mode)):
        if mode is not None:
            result.context["mode"] = mode
    found = localize_divergence(tiny_ctx, [step, affine]).observations
    assert found["component"] == "model.Net" and found["established_below"] == cleared
    assert ("agrees below it" in found["message"]) == bool(cleared)


def test_a_converter_only_the_candidate_has_can_be_blamed(tiny_ctx):
    """A probe that builds its weights through a converter names it in `uses`; when the
    converter's own probe diverges too, the divergence is the converter's, even where that
    probe sits at a higher level than the first layer's."""
    affine = _result("affine", Outcome.VIOLATED, "model.Affine", 1)
    affine.context["uses"] = ["converter"]
    convert = _result("checkpoint", Outcome.VIOLATED, "converter", 2)
    assert localize_divergence(tiny_ctx, [affine, convert]).observations["component"] == "converter"
    agreeing = _result("checkpoint", Outcome.ESTABLISHED, "converter", 2)
    assert localize_divergence(tiny_ctx, [affine, agreeing]).observations["component"] == "model.Affine"


def _traced(pid: str, outcome: Outcome, component: str, level: int, calls: list[tuple[str, str]]) -> ProbeResult:
    from evidence_store.records import FrameworkCall, ReferenceRun

    result = _result(pid, outcome, component, level)
    result.reference_run = ReferenceRun(ran=[component], calls=[FrameworkCall(name=n, caller=c) for n, c in calls])
    return result


TRAIN_CALLS = [
    ("torch.optim.SGD", "train.train"),
    ("torch.Tensor.backward", "train.train"),
    ("torch.optim.SGD.step", "train.train"),
    ("torch.nn.Linear.__call__", "model.Affine.forward"),
]


def test_a_framework_function_the_original_delegates_to_is_named_where_its_own_probe_diverges(tiny_ctx):
    from probes.round_localization import render_localization

    results = [
        _traced("run", Outcome.VIOLATED, "train.train", 3, TRAIN_CALLS),  # a drift in the optimizer's update
        _result("net", Outcome.ESTABLISHED, "model.Net", 2),
        _result("loss", Outcome.ESTABLISHED, "model.loss_fn", 1),  # what the step is given agrees
        # the optimizer's step on the same parameters and gradients on both sides: its outputs diverge
        _traced("sgd", Outcome.VIOLATED, "torch.optim.SGD.step", 1, [("torch.optim.SGD.step", "probe")]),
    ]
    found = localize_divergence(tiny_ctx, results)
    obs = found.observations
    assert obs["component"] == "torch.optim.SGD.step" and obs["framework"] is True
    assert obs["called_from"] == ["train.train"] and obs["probes"] == ["sgd"]
    assert obs["message"].startswith("first divergent component: torch.optim.SGD.step (called from train.train)")
    text = render_localization(found, round=1)
    assert "the divergence starts at torch.optim.SGD.step (called from train.train), a framework function" in text


def test_without_a_probe_of_it_the_divergent_component_lists_the_framework_functions_it_calls(tiny_ctx):
    from probes.round_localization import render_localization

    results = [
        _traced("run", Outcome.VIOLATED, "train.train", 3, TRAIN_CALLS),
        _result("net", Outcome.ESTABLISHED, "model.Net", 2),
        # a framework function nobody in the original is seen calling is no node below anything
        _traced("adam", Outcome.ESTABLISHED, "torch.optim.Adam.step", 1, [("torch.optim.Adam.step", "probe")]),
    ]
    obs = localize_divergence(tiny_ctx, results).observations
    assert obs["component"] == "train.train" and obs["framework"] is False
    assert obs["framework_calls"] == ["torch.optim.SGD", "torch.Tensor.backward", "torch.optim.SGD.step"]
    assert "it calls into the framework: torch.optim.SGD, torch.Tensor.backward, torch.optim.SGD.step" in obs["message"]
    assert "it calls into the framework (its reference run): torch.optim.SGD" in render_localization(
        localize_divergence(tiny_ctx, results), round=1
    )


def test_an_agreeing_probe_of_the_framework_function_leaves_the_divergence_at_the_original(tiny_ctx):
    results = [
        _traced("run", Outcome.VIOLATED, "train.train", 3, TRAIN_CALLS),
        _traced("sgd", Outcome.ESTABLISHED, "torch.optim.SGD.step", 1, [("torch.optim.SGD.step", "probe")]),
    ]
    obs = localize_divergence(tiny_ctx, results).observations
    assert obs["component"] == "train.train" and obs["established_below"] == ["torch.optim.SGD.step"]


@pytest.mark.slow  # runs torch on the reference side
def test_a_seeded_drift_in_the_optimizer_the_original_delegates_to_names_the_framework_call(tmp_path):
    from probe_fixtures import FIXTURES

    from probes.differential import probe_file_probe

    task = FIXTURES / "delegating"  # trainer.train calls torch.optim.AdamW.step; the port's AdamW step drifts
    ctx = make_context(load_task(task), task / "solution" / "app", sandbox_kind="none", workdir=tmp_path)
    results = probe_file_probe(str(FIXTURES / "probe_delegating.py"))(ctx)
    outcomes = {r.property.id: r.outcome for r in results}
    assert outcomes == {
        "trainer.loss": Outcome.ESTABLISHED,  # what the step is given agrees
        "trainer.train": Outcome.VIOLATED,
        "optimizer.adamw_step": Outcome.VIOLATED,  # the same parameters and gradients, diverging updates
    }
    obs = localize_divergence(ctx, results).observations
    assert obs["component"] == "torch.optim.AdamW.step" and obs["called_from"] == ["trainer.train"]
    assert obs["message"].startswith("first divergent component: torch.optim.AdamW.step (called from trainer.train)")
    # without the framework function's own probe, the training run is the suspect and says what it delegates to
    without = localize_divergence(ctx, [r for r in results if r.property.id != "optimizer.adamw_step"]).observations
    assert without["component"] == "trainer.train"
    assert {"torch.optim.AdamW", "torch.optim.AdamW.step", "torch.Tensor.backward"} <= set(without["framework_calls"])
