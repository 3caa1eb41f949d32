"""litgpt-generate's own probe files: their components are the original's, and a probe tells the oracle from a defect.

All of them on the oracle and on every seeded defect is `benchmarks/probes.py --task
litgpt-generate` (results under benchmarks/results/); here one probe runs on the oracle and on
one defect, sharing the reference through the cache.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects
from evidence_store.records import Outcome
from probes.context import make_context
from probes.differential import probe_file_probe
from probes.localize import localize_divergence, module_graph
from probes.probe_format import probe_names
from probes.suite import task_probe_files
from task_model.distribution import is_materialized, original_dir
from task_model.loader import load_task
from task_model.original import OriginalDistribution

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "litgpt-generate"
OWN = TASK / "tests" / "probes"
DECLARED = OriginalDistribution(**tomllib.loads((TASK / "task.toml").read_text())["metadata"]["twin"]["original"])
needs_original = pytest.mark.skipif(not is_materialized(DECLARED), reason="litgpt 0.5.13 is not in twin's cache")


def test_the_task_lists_its_own_probe_files():
    names = {p.name for p in task_probe_files(load_task(TASK))} if is_materialized(DECLARED) else set()
    assert {p.name for p in OWN.glob("*.py")} == {"kernels.py", "model.py", "generation.py"}
    assert not names or names == {"kernels.py", "model.py", "generation.py"}


@needs_original
def test_every_component_and_use_is_a_definition_of_the_original():
    graph = module_graph(original_dir(DECLARED))
    for path in OWN.glob("*.py"):
        for name, meta in probe_names(path).items():
            for component in [meta["component"], *meta.get("uses", [])]:
                assert component in graph, f"{path.name}:{name}: {component}"


@pytest.mark.heavy  # the reference imports litgpt (lightning), the candidate jax
@needs_original
def test_the_kv_cache_probe_tells_the_oracle_from_a_misplaced_write(tmp_path):
    task = load_task(TASK)
    oracle = tmp_path / "oracle"
    shutil.copytree(TASK / "solution" / "app", oracle, ignore=shutil.ignore_patterns("__pycache__"))
    probe = probe_file_probe(str(OWN / "kernels.py"), ["kv_cache"])
    cache = tmp_path / "cache"
    ctx = make_context(task, oracle, sandbox_kind="none", workdir=tmp_path / "w1", reference_cache=cache)
    (good,) = probe(ctx)
    assert good.outcome is Outcome.ESTABLISHED, (good.observations, good.trace)
    defects = load_defects(REPO / "tests" / "benchmark_adapter" / "defects" / "litgpt_generate.py")
    broken = apply_defect(oracle, next(d for d in defects if d.name == "kv-write-off-by-one"), tmp_path / "broken")
    ctx = make_context(task, broken, sandbox_kind="none", workdir=tmp_path / "w2", reference_cache=cache)
    (bad,) = probe(ctx)
    assert bad.outcome is Outcome.VIOLATED
    assert localize_divergence(ctx, [bad]).observations["component"] == "litgpt.model.KVCache"
