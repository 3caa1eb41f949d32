"""The llama-paged-serve task: it loads, its oracle earns full reward, its grader has teeth.

The grader is run exactly as shipped (tests/test.sh, with the path variables pointing
at temporary directories) on the oracle, on the unmigrated PyTorch original, on a
torch-importing candidate and on seeded defects (a fast subset by default, the full
sweep with check coverage under `-m slow`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects
from task_model.loader import load_task
from tests.conftest import TASKS_DIR

TASK = TASKS_DIR / "t2j-mini" / "llama-paged-serve"
ORACLE = TASK / "solution" / "app"
ASSETS = TASK / "environment" / "assets"
# Far above the oracle's own run-to-run spread (float32 reduction order, about 1e-7).
NOISE = 1e-3
FAST_DEFECTS = ["prefill-no-causal-mask", "finished-output-order", "module-renamed"]
MODULES = {
    "config",
    "tokenizer",
    "layers",
    "kv_cache",
    "attention",
    "model",
    "checkpoint",
    "sampler",
    "sequence",
    "block_manager",
    "scheduler",
    "model_runner",
    "engine",
}

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="the oracle needs jax"
)


def _defects():
    path = Path(__file__).parent / "defects" / "llama_paged_serve.py"
    return load_defects(path)


DEFECTS = _defects()


def grade(candidate: Path, logs: Path) -> dict:
    """Run the shipped grader on `candidate`; returns reward.json."""
    env = {
        **os.environ,
        "TESTS_DIR": str(TASK / "tests"),
        "APP_DIR": str(candidate),
        "ASSETS_DIR": str(ASSETS),
        "LOGS_DIR": str(logs),
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", str(TASK / "tests" / "test.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((logs / "reward.json").read_text())


@pytest.fixture(scope="module")
def oracle_result(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("oracle")
    app = root / "app"
    subprocess.run(
        ["bash", str(TASK / "solution" / "solve.sh")],
        env={**os.environ, "APP_DIR": str(app)},
        check=True,
    )
    return grade(app, root / "logs")


def test_task_loads_and_hides_its_grader():
    task = load_task(TASK)
    assert task.name == "llama-paged-serve"
    assert task.settings.forbidden_packages == ["torch"]
    assert task.tests_dir in task.hidden_roots and task.solution_dir in task.hidden_roots
    source_modules = {p.stem for p in (task.source_dir / "paged_serve").glob("*.py")} - {"__init__"}
    oracle_modules = {p.stem for p in (ORACLE / "paged_serve").glob("*.py")} - {"__init__"}
    assert source_modules == oracle_modules == MODULES
    for module in MODULES:
        assert f"`{module}`" in task.instruction


def test_assets_are_small_and_consistent():
    from safetensors.numpy import load_file

    assert (ASSETS / "model.safetensors").stat().st_size < 5_000_000
    config = json.loads((ASSETS / "config.json").read_text())
    tensors = load_file(str(ASSETS / "model.safetensors"))
    assert tensors["model.embed_tokens.weight"].shape == (
        config["vocab_size"],
        config["hidden_size"],
    )
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (
        config["num_key_value_heads"] * config["hidden_size"] // config["num_attention_heads"],
        config["hidden_size"],
    )
    refs = np.load(TASK / "tests" / "refs" / "refs.npz")
    assert int(refs["param_count"]) == sum(t.size for t in tensors.values())
    versions = json.loads((TASK / "tests" / "refs" / "VERSIONS.json").read_text())
    assert versions["torch"].startswith("2.") and versions["numpy"]


def test_grading_library_is_the_shared_copy():
    library = TASKS_DIR.parent / "benchmark_adapter" / "grading" / "templates" / "grader"
    for name in ("grading.py", "grading_run.py", "grading_sandbox.py"):
        assert (TASK / "tests" / name).read_bytes() == (library / name).read_bytes(), name


@pytest.mark.slow
def test_references_are_reproduced_by_the_original(tmp_path):
    """Re-recording from the PyTorch original gives the stored inputs and references."""
    pytest.importorskip("torch")
    copy = tmp_path / "task"
    shutil.copytree(TASK, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, str(copy / "tests" / "record_refs.py")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    for name in ("inputs.npz", "refs/refs.npz"):
        fresh, stored = np.load(copy / "tests" / name), np.load(TASK / "tests" / name)
        assert set(fresh.files) == set(stored.files)
        for key in stored.files:
            np.testing.assert_allclose(fresh[key], stored[key], rtol=1e-5, atol=1e-6, err_msg=key)
    fresh_meta = json.loads((copy / "tests" / "refs" / "meta.json").read_text())
    stored_meta = json.loads((TASK / "tests" / "refs" / "meta.json").read_text())
    assert fresh_meta["dist_band"] == pytest.approx(stored_meta["dist_band"])
    assert fresh_meta["serve_finish_reasons"] == stored_meta["serve_finish_reasons"]


@pytest.mark.heavy  # serves with the oracle engine: its grade is the module's fixture
def test_oracle_earns_full_reward(oracle_result):
    assert oracle_result["reward"] >= 0.97, oracle_result
    assert oracle_result["components"]["independence"] == 1.0
    assert len(oracle_result["checks"]) == 15
    low = {k: v for k, v in oracle_result["checks"].items() if v["score"] < 0.99}
    assert not low, low


def test_unmigrated_torch_original_scores_zero(tmp_path):
    app = tmp_path / "app"
    shutil.copytree(TASK / "environment" / "source", app)
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["components"]["independence"] == 0.0
    assert any("torch" in f for f in result["independence_findings"])


def test_torch_importing_candidate_scores_zero(tmp_path):
    app = tmp_path / "app"
    shutil.copytree(ORACLE, app)
    layers = app / "paged_serve" / "layers.py"
    layers.write_text(
        layers.read_text().replace(
            "import jax\n", "import jax\nimport torch.nn.functional  # noqa\n", 1
        )
    )
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["independence_findings"] == [
        "paged_serve/layers.py:6: imports torch.nn.functional"
    ]


def test_missing_candidate_scores_zero(tmp_path):
    result = grade(tmp_path / "nothing-here", tmp_path / "logs")
    assert result["reward"] == 0.0


def test_defect_list_is_complete():
    assert len(DEFECTS) >= 12
    assert len({d.name for d in DEFECTS}) == len(DEFECTS)
    assert all(d.component.startswith("paged_serve") for d in DEFECTS)


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.name)
def test_defect_applies_to_the_oracle(defect, tmp_path):
    app = apply_defect(ORACLE, defect, tmp_path / "app")
    assert (app / defect.file).read_text() != (ORACLE / defect.file).read_text()


@pytest.mark.heavy  # half a minute each on two cores, after the oracle's grade
@pytest.mark.parametrize("name", FAST_DEFECTS)
def test_seeded_defect_lowers_reward(name, oracle_result, tmp_path):
    defect = next(d for d in DEFECTS if d.name == name)
    result = grade(apply_defect(ORACLE, defect, tmp_path / "app"), tmp_path / "logs")
    assert result["reward"] < oracle_result["reward"] - NOISE, (name, result["checks"])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_full_defect_sweep_lowers_reward_and_covers_the_checks(oracle_result, tmp_path):
    """Every defect costs reward; together they trip at least 85% of the checks.

    A defect that closes the independence gate is not run at all, so its (zero) checks
    do not count towards coverage.
    """
    tripped: set[str] = set()
    independence_tripped = False
    for defect in DEFECTS:
        result = grade(
            apply_defect(ORACLE, defect, tmp_path / defect.name / "app"),
            tmp_path / defect.name / "logs",
        )
        assert result["reward"] < oracle_result["reward"] - NOISE, defect.name
        if result["components"]["independence"] == 0.0:
            independence_tripped = True
            continue
        for check, info in result["checks"].items():
            if info["score"] < oracle_result["checks"][check]["score"] - NOISE:
                tripped.add(check)
    checks = set(oracle_result["checks"])
    assert independence_tripped
    assert len(tripped) / len(checks) >= 0.85, sorted(checks - tripped)


DENSE = r"""
import json, sys
from pathlib import Path
import numpy as np
import torch
tests = Path(sys.argv[1])
sys.path.insert(0, str(tests))
sys.path.insert(0, str(tests.parent / "environment" / "source"))
from record_refs import dense_decode_reference
from paged_serve import attention
inputs = dict(np.load(tests / "inputs.npz"))
paged = attention.paged_decode_attention(
    *(torch.from_numpy(inputs[k]) for k in ("pg_q", "pg_k_cache", "pg_v_cache", "pg_tables", "pg_context"))).numpy()
dense = dense_decode_reference(inputs)
frozen = np.load(tests / "refs" / "refs.npz")["paged_attention_dense"]
print(json.dumps({"original": float(np.max(np.abs(paged - dense))), "frozen": float(np.max(np.abs(frozen - dense)))}))
"""


@pytest.mark.slow  # imports torch in a child process
def test_the_recorders_dense_attention_gives_the_originals_paged_attention():
    """record_refs.py's one stand-in, a dense decode attention (a second reference for the paged one)."""
    proc = subprocess.run([sys.executable, "-c", DENSE, str(TASK / "tests")], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["original"] <= 1e-5 and seen["frozen"] <= 1e-5, seen
