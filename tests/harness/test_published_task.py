"""The bundled published-layout task (tasks/published/tiny-net) through grade, probe, migrate and bench.

The migrations here are driven by scripted replies (labelled 'scripted' in every
output): they test the mechanics on a task laid out as published, not a model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidence_store.store import EvidenceStore
from harness.bench.run import run_bench
from harness.bench.schema import BenchConfig
from harness.cli.app import main
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the published layout is laid out by bwrap")

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "published" / "tiny-net"
ORACLE = TASK / "solution" / "jax_repo" / "tiny_net"
PROBE = (TASK / "tests" / "probes" / "tiny_net.py").read_text()
MODEL_GOOD = (ORACLE / "model.py").read_text()
MODEL_BUGGY = MODEL_GOOD.replace("jnp.tanh(", "jax.nn.relu(")


def migrate_tiny_net(model: str) -> list[dict]:
    return [
        plans.call("read_file", path="/app/torch_orig/tiny_net/model.py"),
        plans.call("bash", command="ls /app/checkpoint /source/tiny_net && pwd"),
        plans.call(
            "write_file", path="/app/jax_repo/tiny_net/__init__.py", content=(ORACLE / "__init__.py").read_text()
        ),
        plans.call("write_file", path="/app/jax_repo/tiny_net/model.py", content=model),
        plans.call("submit", summary="wrote tiny_net"),
    ]


def twin_fix_in_round_two() -> list[dict]:
    return [
        plans.diagnose(),
        *migrate_tiny_net(MODEL_BUGGY),
        plans.call("write_probe", name="tiny_net", source=PROBE),
        plans.call("submit", summary="probed tiny_net"),
        plans.diagnose(),
        plans.call("edit_file", path="/app/jax_repo/tiny_net/model.py", old="jax.nn.relu(", new="jnp.tanh("),
        plans.call("submit", summary="fixed the activation"),
        plans.call("submit", summary="re-ran the probes"),
    ]


def test_grade_oracle_lays_out_app_as_the_dockerfile(tmp_path, capsys):
    out = tmp_path / "grade.json"
    assert main(["grade", "--task", str(TASK), "--oracle", "--out", str(out)]) == 0
    grade = json.loads(out.read_text())
    assert grade["reward"] == 1.0
    assert grade["checks"]["forward.predictions"]["score"] == 1.0


@pytest.mark.heavy  # the task's own probe file on both sides
def test_probe_runs_the_probe_files_a_published_task_lists(capsys):
    assert main(["probe", "--task", str(TASK), "--candidate", str(TASK / "solution" / "jax_repo"), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    outcomes = {r["property"]["id"]: r["outcome"] for r in results}
    assert outcomes["forward.predictions"] == outcomes["loss.mse_and_grads"] == "established"
    assert "violated" not in outcomes.values()


def run_scripted(tmp_path, replies, rounds):
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=TASK, model=model, rounds=rounds)
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    store = EvidenceStore(run.evidence, create=False)
    try:
        outcomes = [(r.round, r.outcome.value) for r in store.records(property_id="forward.predictions")]
    finally:
        store.close()
    grades = json.loads(run.grades.read_text())
    return run, outcomes, {g["round"]: g["reward"] for g in grades["rounds"]}


@pytest.mark.heavy  # a scripted migrate round, probed and graded
def test_migrate_scripted_round_sees_the_layout_and_is_graded(tmp_path):
    replies = twin_fix_in_round_two()[:9]  # round 1 only: the buggy port, probed
    run, outcomes, rewards = run_scripted(tmp_path, replies, rounds=1)
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines()]
    tools = [c for c in calls if c.get("tool") in ("read_file", "bash")]
    assert "class TinyNet" in tools[0]["result"]  # the original at the Dockerfile's path
    # the assets at the Dockerfile's path; commands start in its WORKDIR (/app), as under Harbor
    assert "model.safetensors" in tools[1]["result"] and tools[1]["result"].endswith("\n/app\n")
    assert outcomes == [(1, "violated")]
    assert 0.0 < rewards[1] < 1.0  # the unchanged grader sees the same defect
    migrator = next(c for c in calls if c.get("role") == "migrator" and c.get("type") == "model_call")
    system = migrator["request"]["messages"][0]["content"]
    assert "- `/app/jax_repo`: the candidate repository being built." in system  # where the task puts it


@pytest.mark.slow
def test_migrate_scripted_run_repairs_in_round_two(tmp_path):
    run, outcomes, rewards = run_scripted(tmp_path, twin_fix_in_round_two(), rounds=2)
    assert outcomes == [(1, "violated"), (2, "established")]
    assert rewards[2] == 1.0 and rewards[1] < 1.0
    assert run.load_state().final_round == 2


@pytest.mark.heavy  # a bench of one trial, graded
def test_bench_runs_a_published_task(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    plans.write_script(folder / "tiny-net-base.json", [*migrate_tiny_net(MODEL_GOOD)])
    config = BenchConfig(
        name="p",
        tasks=[TASK],
        models=[f"scripted:{folder}/{{task}}-{{scaffold}}.json"],
        scaffolds=["base"],
        rounds=1,
        seeds=1,
        retry_backoff_s=0,
    )
    results = run_bench(config, tmp_path / "benches")
    (trial,) = results.trials.values()
    assert trial.status == "ok" and trial.rewards == {1: 1.0}


@pytest.mark.parametrize(
    "script, reward",
    [
        pytest.param(
            "mkdir -p /app/jax_repo && cp -r /solution/files/. /app/jax_repo/ && test -d /app/torch_orig",
            1.0,
            marks=pytest.mark.heavy,  # a whole grade, as test_grade_oracle_lays_out_app_as_the_dockerfile's
        ),
        ("cat /tests/test.sh > /app/jax_repo/leak.txt", None),  # the grader is not there to read
        ("true", None),  # writes nothing
    ],
)
def test_grade_oracle_runs_a_solve_script(tmp_path, capsys, script, reward):
    task = tmp_path / "tiny-net"
    shutil.copytree(TASK, task)
    (task / "solution" / "jax_repo").rename(task / "solution" / "files")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{script}\n")
    out = tmp_path / "grade.json"
    code = main(["grade", "--task", str(task), "--oracle", "--out", str(out)])
    if reward is None:
        assert code == 2 and "solve.sh" in capsys.readouterr().err
    else:
        assert code == 0 and json.loads(out.read_text())["reward"] == reward


def test_role_and_grader_boundaries_lay_out_app_as_the_dockerfile(tmp_path):
    from benchmark_adapter.grading.grader import grader_boundary
    from harness.run.workspace import prepare_workspace, role_boundary
    from task_model.loader import load_task

    task = load_task(TASK)
    ws = prepare_workspace(task, tmp_path / "ws")
    migrator = role_boundary(task, ws, name="m", write_candidate=True, side="candidate", audit_log=None)
    inside = {m.inside: m for m in migrator.mounts}
    assert inside["/app/jax_repo"].writable and inside["/app/jax_repo"].host == ws.candidate.resolve()
    for path in ("/app/torch_orig", "/source", "/app/checkpoint", "/assets"):
        assert not inside[path].writable, path
    assert migrator.is_hidden(TASK / "tests" / "refs") and migrator.is_hidden(TASK / "solution")
    assert migrator.env.get("JAX_PLATFORMS") == "cpu" and "torch" in migrator.hidden_packages
    grader = grader_boundary(task, ws.candidate, tmp_path / "logs", audit_log=None)
    inside = {m.inside for m in grader.mounts}
    assert {"/app/torch_orig", "/app/checkpoint", "/app/jax_repo", "/tests"} <= inside and "/source" not in inside
