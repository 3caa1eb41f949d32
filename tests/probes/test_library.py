"""The bundled tasks' own probe files (listed in each task.toml): the oracle passes, seeded defects are caught.

The full measurements (every task, every defect) are slow; the default run keeps one
real-task probe on the oracle and one defect, sharing the reference through the cache.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.grader import oracle_candidate
from benchmark_adapter.grading.sweep import load_defects
from evidence_store.records import Outcome
from probes.context import make_context
from probes.differential import probe_file_probe
from probes.localize import localization_verdict, localize_divergence
from probes.suite import builtin_checks, run_probes, task_probes
from task_model.distribution import is_materialized
from task_model.loader import load_task
from task_model.original import OriginalDistribution

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks" / "t2j-mini"
DEFECT_LISTS = REPO / "tests" / "benchmark_adapter" / "defects"
LIBRARY_TASKS = ["mlp-train", "llama-lora-sft", "llama-paged-serve"]
BUNDLED = sorted(path.parent for path in (REPO / "tasks").rglob("task.toml"))


def _defects(task: str) -> list:
    path = DEFECT_LISTS / f"{task.replace('-', '_')}.py"
    if not path.is_file():
        pytest.skip(f"no seeded defects for {task}")
    return load_defects(path)


def _oracle(task: str, tmp_path: Path) -> Path:
    src = TASKS / task / "solution" / "app"
    if not src.is_dir():
        pytest.skip(f"{task} has no oracle")
    dest = tmp_path / "oracle"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def listed_probe_files(task: Path) -> list[Path]:
    """The probe files a bundled task's task.toml lists (read as TOML: a litgpt task loads only once fetched)."""
    twin = tomllib.loads((task / "task.toml").read_text())["metadata"].get("twin", {})
    return [task / name for name in twin.get("probe_files", [])]


def test_bundled_tasks_list_their_probe_files_and_those_never_read_hidden_task_files():
    files = [path for task in BUNDLED for path in listed_probe_files(task)]
    assert all(path.is_file() for path in files)
    assert {path.parents[2].name for path in files} == {
        "flask-to-starlette", "litgpt-generate", "litgpt-lora", "llama-lora-sft", "llama-paged-serve", "mlp-train",
        "tiny-net",
    }  # fmt: skip
    assert {path.parent.relative_to(path.parents[2]) for path in files} == {Path("tests/probes")}
    for path in files:
        text = path.read_text()
        for hidden in ("/tests", "/solution", "solution/", "tests/"):
            assert hidden not in text, f"{path} mentions {hidden}"


@pytest.mark.heavy  # trains on both sides, twice
def test_mlp_loss_probe_on_oracle_and_on_a_defect(tmp_path):
    task = load_task(TASKS / "mlp-train")
    oracle = _oracle("mlp-train", tmp_path)
    probe = probe_file_probe(str(TASKS / "mlp-train" / "tests" / "probes" / "model.py"), ["loss"])
    cache = tmp_path / "cache"
    ctx = make_context(
        task, oracle, sandbox_kind="none", workdir=tmp_path / "w1", reference_cache=cache
    )
    (good,) = probe(ctx)
    assert good.outcome is Outcome.ESTABLISHED, (good.observations, good.trace)
    defect = next(d for d in _defects("mlp-train") if d.name == "loss-sum-reduction")
    broken = apply_defect(oracle, defect, tmp_path / "broken")
    ctx = make_context(
        task, broken, sandbox_kind="none", workdir=tmp_path / "w2", reference_cache=cache
    )
    (bad,) = probe(ctx)
    assert bad.outcome is Outcome.VIOLATED
    assert (
        localize_divergence(ctx, [bad]).observations["component"]
        == "mlp_train.losses.cross_entropy"
    )


@pytest.mark.slow
@pytest.mark.parametrize("task_name", LIBRARY_TASKS)
def test_oracle_has_no_violated_and_most_established(task_name, tmp_path):
    task = load_task(TASKS / task_name)
    ctx = make_context(task, _oracle(task_name, tmp_path), workdir=tmp_path / "work")
    results = run_probes(ctx, builtin_checks(task) + task_probes(task), jobs=2)
    violated = [
        (r.property.id, r.observations.get("message"))
        for r in results
        if r.outcome is Outcome.VIOLATED
    ]
    assert violated == []
    established = sum(r.outcome is Outcome.ESTABLISHED for r in results) / len(results)
    assert established >= 0.9


TRACED_AT_LEAST = {
    "flask-to-starlette": 0,
    "litgpt-generate": 17,
    "litgpt-lora": 16,
    "published/tiny-net": 2,
    "t2j-mini/llama-lora-sft": 25,
    "t2j-mini/llama-paged-serve": 17,
    "t2j-mini/mlp-train": 15,
}
"""Every bundled task with probe files, and how many of its probes at least run traced on the reference side:
its differential probes (a candidate-side check has no reference; flask-to-starlette's probes are service
probes, whose reference is the original's server in a process of its own, not a traced function)."""


def test_every_bundled_task_with_probe_files_is_checked_against_its_original():
    with_probes = {str(path.relative_to(REPO / "tasks")) for path in BUNDLED if listed_probe_files(path)}
    assert with_probes == set(TRACED_AT_LEAST)


@pytest.mark.heavy
@pytest.mark.parametrize("where", sorted(TRACED_AT_LEAST))
def test_references_run_the_originals_own_components(where, tmp_path):
    """No property of the task's probe files is established only against a re-implementation on
    the oracle: each reference runs the original's function its `component` names."""
    path = REPO / "tasks" / where
    declared = tomllib.loads((path / "task.toml").read_text())["metadata"].get("twin", {}).get("original")
    if declared is not None and not is_materialized(OriginalDistribution(**declared)):
        pytest.skip(f"{where}'s original is not in twin's cache (twin task fetch tasks/{where})")
    task = load_task(path)
    oracle = tmp_path / "oracle"
    shutil.copytree(oracle_candidate(task), oracle, ignore=shutil.ignore_patterns("__pycache__"))
    ctx = make_context(task, oracle, sandbox_kind="none", workdir=tmp_path / "work")
    results = run_probes(ctx, task_probes(task), jobs=2)
    traced = [r for r in results if r.reference_run is not None]
    assert len(traced) >= TRACED_AT_LEAST[where]
    assert [(r.property.id, r.reference_run.not_ran) for r in traced if r.reference_run.not_ran] == []
    assert [r.property.id for r in results if r.outcome is not Outcome.ESTABLISHED] == []


@pytest.mark.slow
@pytest.mark.parametrize("task_name", LIBRARY_TASKS)
def test_seeded_defects_are_caught_and_localized(task_name, tmp_path):
    task = load_task(TASKS / task_name)
    oracle = _oracle(task_name, tmp_path)
    cache = tmp_path / "cache"
    caught, localized = 0, 0
    defects = _defects(task_name)
    for defect in defects:
        cand = apply_defect(oracle, defect, tmp_path / f"d-{defect.name}")
        ctx = make_context(task, cand, workdir=tmp_path / f"w-{defect.name}", reference_cache=cache)
        results = run_probes(ctx, builtin_checks(task) + task_probes(task), jobs=2)
        if any(r.outcome is Outcome.VIOLATED for r in results):
            caught += 1
            found = localize_divergence(ctx, results)
            found = found.observations["component"] if found else None
            verdict = localization_verdict(found, defect.component, task.source_dir, oracle)
            localized += verdict in ("exact", "counterpart")
    assert caught >= 0.9 * len(defects)
    assert localized >= 0.7 * caught


def test_a_train_step_that_grows_the_base_tree_is_not_base_untouched(monkeypatch):
    """The common part of two trees agreeing says nothing of a leaf one of them added."""
    import importlib.util
    import sys
    import types
    from types import SimpleNamespace

    import numpy as np

    path = TASKS / "llama-lora-sft" / "tests" / "probes" / "candidate.py"
    spec = importlib.util.spec_from_file_location("llama_lora_sft_candidate_probes", path)
    candidate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidate)

    def make_train_step(cfg, tcfg):
        def step(state, batch):
            base = {**state.params["base"], "zz_added": np.ones(1)}  # sorts after every original leaf
            lora = {"a": state.params["lora"]["a"] + 1.0}
            return SimpleNamespace(params={"base": base, "lora": lora}), {"loss": 1.0, "grad_norm": 1.0}

        return step

    train = types.ModuleType("llama_sft.train")
    train.make_train_step = make_train_step
    monkeypatch.setitem(sys.modules, "llama_sft", types.ModuleType("llama_sft"))
    monkeypatch.setitem(sys.modules, "llama_sft.train", train)
    state = SimpleNamespace(params={"base": {"w": np.ones(2)}, "lora": {"a": np.zeros(2)}})
    monkeypatch.setattr(candidate, "_cfgs", lambda env: (None, None))
    monkeypatch.setattr(candidate, "_state_and_batch", lambda env: (state, None))
    checks = candidate.check_grads_live(None)
    assert checks["base_untouched"] is False and checks["adapters_move"] is True
