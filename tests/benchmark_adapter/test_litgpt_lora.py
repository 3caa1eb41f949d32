"""The litgpt-lora task: its original is declared (litgpt 0.5.13), its oracle earns full reward, its grader has teeth.

The original comes from twin's cache (`scripts/setup.sh` fetches it); without it the tests
that need it skip. The grader is run exactly as shipped (tests/test.sh with the path variables
pointing at temporary directories).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects
from benchmarks.task_sizes import original_size
from task_model.distribution import is_materialized, original_dir
from task_model.distribution_install import dockerfile_fetch_run
from task_model.loader import load_task
from task_model.original import OriginalDistribution
from tests.conftest import TASKS_DIR
from tests.fakes.wheels import reference_pythonpath

TASK = TASKS_DIR / "litgpt-lora"
ORACLE = TASK / "solution" / "app"
ASSETS = TASK / "environment" / "assets"
DECLARED = OriginalDistribution(**tomllib.loads((TASK / "task.toml").read_text())["metadata"]["twin"]["original"])
DEFECTS = load_defects(Path(__file__).parent / "defects" / "litgpt_lora.py")

needs_original = pytest.mark.skipif(
    not is_materialized(DECLARED),
    reason="litgpt 0.5.13 is not in twin's cache (run `twin task fetch tasks/litgpt-lora`)",
)
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="the oracle needs jax")


def grade(candidate: Path, logs: Path) -> dict:
    env = {**os.environ, "TESTS_DIR": str(TASK / "tests"), "APP_DIR": str(candidate),
           "ASSETS_DIR": str(ASSETS), "LOGS_DIR": str(logs), "PYTHON": sys.executable}  # fmt: skip
    proc = subprocess.run(["bash", str(TASK / "tests" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((logs / "reward.json").read_text())


def test_the_task_declares_its_original_and_holds_none_of_it():
    assert (DECLARED.distribution, DECLARED.version, DECLARED.license) == ("litgpt", "0.5.13", "Apache-2.0")
    assert not (TASK / "environment" / "source").exists()
    assert not [p for p in TASK.rglob("*") if p.is_file() and "litgpt-0.5.13.dist-info" in str(p)]


@needs_original
def test_the_task_reads_its_original_from_the_cache():
    task = load_task(TASK)
    assert task.source_dir == original_dir(DECLARED)
    size = original_size(task.source_dir)
    assert size["modules"] >= 12 and size["lines"] >= 2500 and size["torch_lines"] >= 1500, size
    for module in ("model.py", "lora.py", "config.py", "utils.py", "finetune/lora.py"):
        assert (task.source_dir / "litgpt" / module).is_file()


@needs_original
def test_the_oracle_mirrors_the_originals_modules():
    ours = sorted(str(p.relative_to(ORACLE)) for p in ORACLE.rglob("*.py"))
    assert len(ours) >= 9
    missing = [path for path in ours if not (original_dir(DECLARED) / path).is_file()]
    assert missing == []


def test_the_dockerfile_fetches_exactly_the_declared_original():
    runs = re.findall(r"^RUN (.*)$", (TASK / "environment" / "Dockerfile").read_text(), re.MULTILINE)
    assert dockerfile_fetch_run(DECLARED, "/source") in runs


def test_the_grading_library_is_the_shared_copy():
    library = TASKS_DIR.parent / "benchmark_adapter" / "grading" / "templates" / "grader"
    for name in ("grading.py", "grading_run.py", "grading_sandbox.py"):
        assert (TASK / "tests" / name).read_bytes() == (library / name).read_bytes(), name


def test_defects_apply_to_the_oracle(tmp_path):
    assert len(DEFECTS) >= 25
    assert len({d.name for d in DEFECTS}) == len(DEFECTS)
    for defect in DEFECTS:
        assert defect.component.startswith("litgpt.")
        apply_defect(ORACLE, defect, tmp_path / defect.name)


@pytest.mark.heavy  # imports litgpt (lightning) and writes the checkpoint again
@needs_original
def test_assets_are_made_again_exactly(tmp_path):
    copy = tmp_path / "environment"
    shutil.copytree(TASK / "environment", copy, ignore=shutil.ignore_patterns("assets"))
    env = {**os.environ, "LITGPT_SOURCE": str(original_dir(DECLARED)), **reference_pythonpath(DECLARED)}
    subprocess.run([sys.executable, str(copy / "make_assets.py")], env=env, check=True, capture_output=True)
    for path in ASSETS.iterdir():
        assert (copy / "assets" / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.fixture(scope="module")
def oracle_result(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("oracle")
    subprocess.run(["bash", str(TASK / "solution" / "solve.sh")], env={**os.environ, "APP_DIR": str(root / "app")},
                   check=True)  # fmt: skip
    return grade(root / "app", root / "logs")


@pytest.mark.heavy  # a whole grade: every probe and the fine-tuning run (one to two minutes on two cores)
@needs_jax
def test_oracle_scores_at_least_097(oracle_result):
    assert oracle_result["reward"] >= 0.97, json.dumps(oracle_result["checks"], indent=1)
    failing = {k: v["score"] for k, v in oracle_result["checks"].items() if v["score"] < 0.97}
    assert not failing, failing


@pytest.mark.heavy
@needs_original
def test_the_torch_original_scores_zero(tmp_path):
    shutil.copytree(original_dir(DECLARED), tmp_path / "app")
    result = grade(tmp_path / "app", tmp_path / "logs")
    assert result["reward"] == 0.0 and result["components"]["independence"] == 0.0


@pytest.mark.heavy
def test_an_empty_candidate_scores_zero(tmp_path):
    (tmp_path / "app").mkdir()
    assert grade(tmp_path / "app", tmp_path / "logs")["reward"] == 0.0


@pytest.mark.heavy
@needs_jax
def test_a_port_whose_fit_logs_as_litgpt_logs_gets_the_schedule_in_full(oracle_result):
    assert oracle_result["checks"]["L5.fit.schedule"]["score"] == 1.0
    assert oracle_result["checks"]["L1.lr_schedule"]["score"] == 1.0


@pytest.mark.heavy  # a whole grade of the variant
@needs_jax
def test_a_port_logging_the_rate_its_step_used_loses_only_the_fit_schedule(tmp_path):
    variant = next(d for d in DEFECTS if d.name == "fit-logs-the-rate-before-the-step")
    result = grade(apply_defect(ORACLE, variant, tmp_path / "app"), tmp_path / "logs")
    below = {k: v["score"] for k, v in result["checks"].items() if v["score"] < 1.0}
    assert list(below) == ["L5.fit.schedule"] and below["L5.fit.schedule"] < 0.1, below


RECORDER_SPY = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("record_refs", sys.argv[1])
recorder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recorder)
real, calls = recorder.finetune.fit, []
def spy(*args, **kwargs):
    calls.append(kwargs["train"].max_steps)
    return real(*args, **kwargs)
recorder.finetune.fit = spy
inputs, refs, values = recorder.compute()
print(json.dumps({"calls": calls, "fit.lr": values["fit.lr"], "drifted": recorder.check_frozen(inputs, refs, values)}))
"""


@pytest.mark.heavy  # records every reference again (litgpt and lightning imported): about 20 s
@needs_original
def test_the_fit_references_come_from_litgpts_own_fit_and_are_what_it_gives_now():
    env = {**os.environ, "LITGPT_SOURCE": str(original_dir(DECLARED)), **reference_pythonpath(DECLARED)}
    proc = subprocess.run([sys.executable, "-c", RECORDER_SPY, str(TASK / "tests" / "record_refs.py")], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    # the six-step probe (float32, float64), then the whole fine-tuning run (float32, float64)
    assert seen["calls"] == [6, 6, 24, 24]
    assert seen["drifted"] == []
    frozen = json.loads((TASK / "tests" / "refs" / "refs.json").read_text())
    assert seen["fit.lr"] == frozen["fit.lr"]
    # litgpt logs the scheduler's rate after each step: the schedule's rate for the next step
    assert frozen["fit.lr"] == frozen["schedule.lr"][1:] + [0.0]


@pytest.mark.heavy  # the recorder's check twice, on the reference side (about 40 s)
@needs_original
def test_task_check_names_a_frozen_rate_edited_one_ulp_beyond_its_noise(tmp_path):
    import numpy as np

    from benchmark_adapter.grading.check import check_task
    from benchmark_adapter.grading.grader import Grade

    copy = tmp_path / "litgpt-lora"
    shutil.copytree(TASK, copy)
    refs = copy / "tests" / "refs" / "refs.json"
    values = json.loads(refs.read_text())
    rate = np.float32(values["fit.lr"][3])  # the grader (and so the check) reads every number as float32
    beyond = rate
    while 2.0 * abs(float(beyond) - float(rate)) / (abs(float(beyond)) + abs(float(rate)) + 1e-12) <= 2**-22:
        beyond = np.nextafter(beyond, np.float32(np.inf))  # the rate has no noise: twice one float32 step is its floor
    beyond = float(beyond)

    def fake_grade(task, candidate):
        reward = 1.0 if any(Path(candidate).iterdir()) else 0.0
        return Grade(task="t", candidate="c", reward=reward, returncode=0, duration_s=0.0, sandbox="none")

    def check():
        return check_task(load_task(copy), grade_fn=fake_grade, parallel=False, reference_sample=1)

    clean = check()
    assert clean.passed and clean.rows[-1].name == "reference recorder tests/record_refs.py", clean.failure_line()
    refs.write_text(json.dumps({**values, "fit.lr": [*values["fit.lr"][:3], beyond, *values["fit.lr"][4:]]}))
    edited = check()
    assert not edited.passed
    assert "recorder tests/record_refs.py" in edited.failure_line() and "fit.lr[3]" in edited.failure_line()
