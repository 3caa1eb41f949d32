"""The llama-lora-sft task: it loads, its oracle earns full reward, its grader has teeth.

The grader is run exactly as shipped (tests/test.sh, with the path variables pointing at
temporary directories) on the oracle, on the unmigrated PyTorch original, on a candidate
that imports torch, on an empty candidate and on seeded defects (a fast subset by default,
the full sweep with check coverage under `-m slow`).
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
from benchmark_adapter.grading.grader import Grade
from benchmark_adapter.grading.sweep import load_defects, run_sweep
from task_model.loader import load_task
from tests.conftest import TASKS_DIR

TASK = TASKS_DIR / "t2j-mini" / "llama-lora-sft"
ORACLE = TASK / "solution" / "app"
ASSETS = TASK / "environment" / "assets"
FAST_DEFECTS = ["attention-no-causal-mask", "label-mask-off-by-one", "adamw-decay-on-frozen-base"]
MODULES = {
    "__init__", "config", "tokenizer", "template", "data", "lora", "checkpoint", "loss", "optim",
    "evaluate", "train", "modeling/__init__", "modeling/norm", "modeling/rotary", "modeling/attention",
    "modeling/mlp", "modeling/llama",
}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the oracle needs jax")


def _defects():
    path = Path(__file__).parent / "defects" / "llama_lora_sft.py"
    return load_defects(path)


DEFECTS = _defects()


def grade(candidate: Path, logs: Path) -> dict:
    """Run the shipped grader on `candidate`; returns reward.json."""
    env = {**os.environ, "TESTS_DIR": str(TASK / "tests"), "APP_DIR": str(candidate),
           "ASSETS_DIR": str(ASSETS), "LOGS_DIR": str(logs), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(TASK / "tests" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((logs / "reward.json").read_text())


def _modules(package: Path) -> set[str]:
    return {str(p.relative_to(package).with_suffix("")) for p in package.rglob("*.py")}


@pytest.fixture(scope="module")
def oracle_result(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("oracle")
    app = root / "app"
    subprocess.run(["bash", str(TASK / "solution" / "solve.sh")], env={**os.environ, "APP_DIR": str(app)},
                   check=True)
    return grade(app, root / "logs")


def test_task_loads_and_hides_its_grader():
    task = load_task(TASK)
    assert task.name == "llama-lora-sft"
    assert task.settings.forbidden_packages == ["torch"]
    assert task.tests_dir in task.hidden_roots and task.solution_dir in task.hidden_roots
    assert _modules(task.source_dir / "llama_sft") == _modules(ORACLE / "llama_sft") == MODULES
    for module in ("config", "tokenizer", "template", "data", "lora", "checkpoint", "loss", "optim",
                   "evaluate", "train"):
        assert f"`{module}`" in task.instruction


def test_assets_are_small_and_regenerated_exactly(tmp_path):
    out = tmp_path / "assets"
    subprocess.run([sys.executable, str(TASK / "environment" / "make_assets.py"), "--out", str(out)], check=True)
    for name in ("config.json", "model.safetensors", "sft_data.jsonl"):
        assert (out / name).read_bytes() == (ASSETS / name).read_bytes(), name
    assert (ASSETS / "model.safetensors").stat().st_size < 5_000_000
    from safetensors.numpy import load_file

    config = json.loads((ASSETS / "config.json").read_text())
    tensors = load_file(str(ASSETS / "model.safetensors"))
    head_dim = config["dim"] // config["n_heads"]
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (config["n_kv_heads"] * head_dim, config["dim"])
    versions = json.loads((TASK / "tests" / "refs" / "VERSIONS.json").read_text())
    assert versions["torch"].startswith("2.") and versions["numpy"]


def test_grading_library_is_the_shared_copy():
    library = TASKS_DIR.parent / "benchmark_adapter" / "grading" / "templates" / "grader"
    for name in ("grading.py", "grading_run.py", "grading_sandbox.py"):
        assert (TASK / "tests" / name).read_bytes() == (library / name).read_bytes(), name


def test_defects_apply_to_the_oracle(tmp_path):
    assert len(DEFECTS) >= 12
    assert len({d.name for d in DEFECTS}) == len(DEFECTS)
    for defect in DEFECTS:
        assert defect.component.startswith("llama_sft.")
        apply_defect(ORACLE, defect, tmp_path / defect.name)


@pytest.mark.heavy  # a graded training run (half a minute or more on two cores)
def test_oracle_scores_at_least_097(oracle_result):
    assert oracle_result["reward"] >= 0.97, json.dumps(oracle_result["checks"], indent=1)
    assert oracle_result["components"]["independence"] == 1.0
    assert oracle_result["components"]["spec"] == 1.0
    failing = {k: v["score"] for k, v in oracle_result["checks"].items() if v["score"] < 0.97}
    assert not failing, failing


@pytest.mark.heavy  # a graded training run (half a minute or more on two cores)
def test_torch_original_scores_zero(tmp_path):
    app = tmp_path / "app"
    shutil.copytree(TASK / "environment" / "source", app)
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["components"]["independence"] == 0.0
    assert any("torch" in f for f in result["independence"]["static"])


@pytest.mark.heavy  # a graded training run (half a minute or more on two cores)
def test_torch_importing_candidate_scores_zero(tmp_path):
    app = tmp_path / "app"
    shutil.copytree(ORACLE, app)
    init = app / "llama_sft" / "__init__.py"
    init.write_text("import torch  # noqa: F401\n" + init.read_text())
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["components"]["independence"] == 0.0
    assert any("torch" in f for f in result["independence"]["static"])


@pytest.mark.slow
def test_guarded_torch_import_scores_zero(tmp_path):
    """Numerically perfect, but the candidate reaches for torch: the gate zeroes the reward."""
    app = tmp_path / "app"
    shutil.copytree(ORACLE, app)
    lora = app / "llama_sft" / "lora.py"
    lora.write_text("try:\n    import torch  # noqa: F401\nexcept ImportError:\n    torch = None\n" + lora.read_text())
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["components"]["independence"] == 0.0
    assert result["checks"]["L3.forward.lora"]["score"] > 0.97  # the numbers alone would have passed


@pytest.mark.heavy  # a graded training run (half a minute or more on two cores)
def test_empty_candidate_scores_zero(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    result = grade(app, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["checks"]["L0.layout"]["score"] == 0.0


@pytest.mark.heavy  # a minute or more each on two cores: llama-paged-serve keeps one defect in the default suite
@pytest.mark.parametrize("name", FAST_DEFECTS)
def test_fast_defects_lower_the_reward(name, oracle_result, tmp_path):
    defect = next(d for d in DEFECTS if d.name == name)
    app = apply_defect(ORACLE, defect, tmp_path / "app")
    result = grade(app, tmp_path / "logs")
    assert result["reward"] < oracle_result["reward"] - 1e-6
    tripped = [k for k, v in result["checks"].items() if v["score"] < oracle_result["checks"][k]["score"] - 1e-6]
    assert tripped, f"{name} tripped no check"


def _grade_fn(task, candidate: Path) -> Grade:
    logs = candidate.parent / "logs"
    result = grade(candidate, logs)
    return Grade(task=task.name, candidate=str(candidate), reward=result["reward"],
                 components=result["components"], checks=result["checks"], reward_file="reward.json",
                 returncode=0, duration_s=0.0, sandbox="test.sh")


@pytest.mark.slow
def test_full_defect_sweep_catches_every_defect_and_trips_most_checks(oracle_result, tmp_path):
    task = load_task(TASK)
    oracle = Grade(task=task.name, candidate=str(ORACLE), reward=oracle_result["reward"],
                   components=oracle_result["components"], checks=oracle_result["checks"],
                   reward_file="reward.json", returncode=0, duration_s=0.0, sandbox="test.sh")
    report = run_sweep(task, DEFECTS, grade_fn=_grade_fn, oracle_grade=oracle)
    missed = [d.name for d in report.defects if not d.caught]
    assert not missed, missed
    assert report.tripped_fraction >= 0.85, report.untripped_checks


@pytest.mark.slow
def test_references_are_reproduced_by_the_original(tmp_path):
    """Re-recording from the PyTorch original gives the stored inputs and references."""
    pytest.importorskip("torch")
    copy = tmp_path / "task"
    shutil.copytree(TASK, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, str(copy / "tests" / "record_refs.py")], check=True, capture_output=True,
                   timeout=900)
    for name in ("inputs/inputs.npz", "refs/refs.npz"):
        fresh, stored = np.load(copy / "tests" / name), np.load(TASK / "tests" / name)
        assert set(fresh.files) == set(stored.files)
        for key in stored.files:
            np.testing.assert_allclose(fresh[key], stored[key], rtol=1e-5, atol=1e-6, err_msg=key)
    fresh_values = json.loads((copy / "tests" / "refs" / "refs.json").read_text())
    stored_values = json.loads((TASK / "tests" / "refs" / "refs.json").read_text())
    for key in ("data.val_prompts", "data.batches", "tok.encode", "template.prompt", "loss.count"):
        assert fresh_values[key] == stored_values[key], key
    assert fresh_values["train.fixed.metrics"]["val_loss"] == pytest.approx(
        stored_values["train.fixed.metrics"]["val_loss"], rel=1e-5)


STEPS = r"""
import json, sys, tempfile
from pathlib import Path
import numpy as np
tests = Path(sys.argv[1])
sys.path.insert(0, str(tests))
import record_refs as recorder  # its imports and constants; main() is not run
from safetensors.numpy import load_file, save_file
from llama_sft.config import TrainConfig
from llama_sft.optim import build_optimizer
from llama_sft.train import train
import torch
inputs = dict(np.load(tests / "inputs" / "inputs.npz"))
with tempfile.TemporaryDirectory() as tmp:
    init = {k[len("init_adapter_file."):]: v for k, v in inputs.items() if k.startswith("init_adapter_file.")}
    save_file(init, str(Path(tmp) / "init.safetensors"))
    metrics = train(recorder.ASSETS, recorder.ASSETS / "sft_data.jsonl", TrainConfig(**recorder.PROBE_TRAIN),
                    Path(tmp) / "out", init_adapter=Path(tmp) / "init.safetensors")
    adapter = load_file(str(Path(tmp) / "out" / "adapter.safetensors"))
cfg = recorder.load_train_config(recorder.SOURCE / "configs" / "sft_tiny.json")
_, scheduler = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
rates = []
for _ in range(cfg.total_steps + 2):
    rates.append(scheduler.get_last_lr()[0])
    scheduler.optimizer.step()
    scheduler.step()
print(json.dumps({"metrics": metrics, "adapter": {k: v.tolist() for k, v in adapter.items()}, "rates": rates}))
"""


@pytest.mark.slow  # six optimizer steps and a schedule of the original, in a child process (about 10 s)
def test_the_recorders_step_loop_and_schedule_are_the_originals_train():
    """record_refs.py's stand-ins: its six-step loop is the original's `train` loop (same losses, rates,
    gradient norms and trained factors), and its `schedule.lr` is the original's scheduler's rates."""
    proc = subprocess.run([sys.executable, "-c", STEPS, str(TASK / "tests")], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    values = json.loads((TASK / "tests" / "refs" / "refs.json").read_text())
    refs = np.load(TASK / "tests" / "refs" / "refs.npz")
    metrics = seen["metrics"]
    assert metrics["lr"] == values["steps.lr"]
    np.testing.assert_allclose(metrics["train_loss"], values["steps.loss"], rtol=1e-5)
    np.testing.assert_allclose(metrics["grad_norm"], values["steps.grad_norm"], rtol=1e-5)
    assert len(seen["adapter"]) == 28
    for name, value in seen["adapter"].items():  # the file's [out, in] layout; the recorder keeps [in, out]
        module, factor = name.rsplit(".", 1)
        frozen = refs[f"steps.lora.{module}.{factor[-1].lower()}"].T
        value = np.asarray(value)
        assert np.max(np.abs(frozen - value)) <= 1e-3 * np.max(np.abs(value)), name
    np.testing.assert_allclose(refs["schedule.lr"], np.asarray(seen["rates"], np.float32), rtol=0, atol=0)
