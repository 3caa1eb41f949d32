"""The bundled mlp-train task: layout, assets, references, oracle, independence, defects."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.grader import oracle_copy, run_grader
from benchmark_adapter.grading.sweep import load_defects, run_sweep
from task_model.loader import load_task

REPO = Path(__file__).resolve().parents[2]
TASK_DIR = REPO / "tasks" / "t2j-mini" / "mlp-train"
DEFECTS_FILE = Path(__file__).resolve().parent / "defects" / "mlp_train.py"
# one defect per family in the default run: independence gate, model numerics, optimizer schedule
FAST_SUBSET = ("converter-imports-torch", "gelu-tanh-approximation", "warmup-off-by-one")
requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture(scope="module")
def task():
    return load_task(TASK_DIR)


@pytest.fixture(scope="module")
def oracle_grade(task):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    with oracle_copy(task) as app:
        return run_grader(task, app, sandbox="bwrap")


# ---- static: layout, assets, references, defects ---------------------------------------------
def test_task_loads_with_source_assets_tests_and_oracle(task):
    assert task.name == "mlp-train"
    assert (task.source_dir / "mlp_train" / "train.py").is_file()
    assert {p.name for p in task.assets_dir.iterdir()} == {"dataset.npz", "init.safetensors"}
    for name in ("test.sh", "grade.py", "drivers.py", "grading.py", "grading_run.py", "grading_sandbox.py", "record_refs.py", "inputs.npz"):
        assert (task.tests_dir / name).is_file()
    assert (task.solution_dir / "solve.sh").is_file()


def test_oracle_mirrors_the_source_layout(task):
    def modules(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*.py") if "__pycache__" not in p.parts}

    assert modules(task.source_dir / "mlp_train") == modules(task.solution_dir / "app" / "mlp_train")


def test_assets_are_reproduced_by_their_script(task):
    spec = importlib.util.spec_from_file_location("mlp_make_assets", TASK_DIR / "environment" / "make_assets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from safetensors.numpy import load_file

    with np.load(task.assets_dir / "dataset.npz") as f:
        stored = {k: f[k] for k in f.files}
    fresh = module.make_dataset(np.random.default_rng(20260101))
    assert all(np.array_equal(stored[k], fresh[k]) for k in ("x", "y"))
    ckpt = load_file(str(task.assets_dir / "init.safetensors"))
    fresh_ckpt = module.make_checkpoint(np.random.default_rng(7))
    assert ckpt.keys() == fresh_ckpt.keys()
    assert all(np.array_equal(ckpt[k], fresh_ckpt[k]) for k in ckpt)


def test_references_say_what_recorded_them(task):
    meta = json.loads((task.tests_dir / "refs" / "meta.json").read_text())
    assert meta["recorded_with"]["torch"].startswith("2.")
    assert meta["reference_wall_s"] > 0
    for entry in meta["held_out"].values():
        assert entry["band"] >= 0 and np.isfinite(entry["reference"])
    refs = np.load(task.tests_dir / "refs" / "refs.npz")
    assert "logits/64" in refs.files and refs["logits/64"].shape == (64, 4)


def test_oracle_and_source_import_no_torch_and_source_does(task):
    sys.path.insert(0, str(task.tests_dir))
    try:
        from grading import scan_forbidden_imports
    finally:
        sys.path.remove(str(task.tests_dir))
        sys.modules.pop("grading", None)
    assert scan_forbidden_imports(task.solution_dir / "app", ["torch"]) == []
    assert scan_forbidden_imports(task.source_dir, ["torch"]) != []


def test_defect_list_is_large_unique_and_applies_to_the_oracle(task, tmp_path):
    defects = load_defects(DEFECTS_FILE)
    assert len(defects) >= 12
    assert len({d.name for d in defects}) == len(defects)
    assert set(FAST_SUBSET) <= {d.name for d in defects}
    for defect in defects:
        dest = apply_defect(task.solution_dir / "app", defect, tmp_path / defect.name)
        assert (dest / defect.file).read_text() != (task.solution_dir / "app" / defect.file).read_text()


# ---- graded: oracle, independence gate, defects -----------------------------------------------
@pytest.mark.heavy  # trains the oracle; the example's grades cover it too
@requires_bwrap
def test_oracle_scores_at_least_097(oracle_grade):
    assert oracle_grade.error is None, oracle_grade.log_tail
    assert oracle_grade.reward >= 0.97, oracle_grade.checks
    assert oracle_grade.components["independence"] == 1.0
    assert len(oracle_grade.checks) >= 15


@requires_bwrap
def test_the_pytorch_original_scores_zero(task, tmp_path):
    original = tmp_path / "app"
    shutil.copytree(task.source_dir, original)
    grade = run_grader(task, original, sandbox="bwrap")
    assert grade.error is None, grade.log_tail
    assert grade.reward == 0.0
    assert grade.components["independence"] == 0.0
    assert grade.checks["L0.independence.static"]["score"] == 0.0


@pytest.mark.heavy
@requires_bwrap
def test_a_subset_of_defects_is_caught(task, oracle_grade):
    defects = [d for d in load_defects(DEFECTS_FILE) if d.name in FAST_SUBSET]
    report = run_sweep(task, defects, sandbox="bwrap", oracle_grade=oracle_grade)
    for outcome in report.defects:
        assert outcome.caught, (outcome.name, outcome.reward, report.oracle_reward)
        assert outcome.tripped
    gate = next(d for d in report.defects if d.name == "converter-imports-torch")
    assert gate.reward == 0.0


@pytest.mark.slow
@pytest.mark.timeout(3600)
@requires_bwrap
def test_full_sweep_every_defect_caught_and_85_percent_of_checks_tripped(task, oracle_grade):
    defects = load_defects(DEFECTS_FILE)
    report = run_sweep(task, defects, sandbox="bwrap", oracle_grade=oracle_grade, jobs=2)
    missed = [(d.name, d.reward) for d in report.defects if not d.caught]
    assert not missed, f"defects not caught (oracle {report.oracle_reward}): {missed}"
    assert report.tripped_fraction >= 0.85, report.untripped_checks


@pytest.mark.slow
@requires_bwrap
def test_twin_grade_oracle_prints_at_least_097(tmp_path):
    out = tmp_path / "grade.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.app",
            "grade",
            "--task",
            str(TASK_DIR),
            "--oracle",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "reward" in proc.stdout
    assert json.loads(out.read_text())["reward"] >= 0.97
