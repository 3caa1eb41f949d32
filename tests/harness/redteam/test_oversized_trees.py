"""An agent's tree grown over the snapshot caps of a read-only root fails its commands, never the trial.

A read-only root is presented to a sandbox as a snapshot of hard links, within caps
(`ground.sandboxes.presentation`). The Migrator writes `/app` freely, so it can grow the
tree that its own reference shell, the Verifier's probes and the grader see read-only
past those caps. Each test grows it from the candidate's side and checks that the
command fails as the candidate's (a tool error, a violated probe, a zero grade) and that
twin goes on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmark_adapter.grading import grader
from evidence_store.records import Outcome
from ground.boundary import Boundary, Mount
from ground.isolation import python_mounts
from ground.sandboxes.presentation import MAX_SNAPSHOT_ENTRIES
from ground.sandboxes.quota import EXT4, unavailable
from ground.sandboxes.registry import make_sandbox
from ground.trajectory import ToolCallRecord, Trajectory
from harness.bench.schema import TrialSpec
from harness.bench.trials import collect_trial
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from probes.checks import imports_check
from probes.context import make_context
from probes.differential import probe_file_probe
from task_model.loader import load_task
from tests.conftest import docker_engine, requires_bwrap
from tests.harness import loop_scripts as plans

pytestmark = [requires_bwrap, pytest.mark.heavy]  # trees grown past the caps: minutes on two cores
call = plans.call
OVER = MAX_SNAPSHOT_ENTRIES + 1
GROW = f"mkdir -p /app/junk && python3 -c \"[open(f'/app/junk/{{i}}', 'w').close() for i in range({OVER})]\""
REFUSAL = f"did not run: the read-only root /app holds more than {MAX_SNAPSHOT_ENTRIES} entries"


def grow(tree: Path) -> None:
    """What the Migrator's shell does in GROW, from the host."""
    junk = tree / "junk"
    junk.mkdir()
    for i in range(OVER):
        (junk / str(i)).touch()


def candidate(tree: Path) -> Path:
    (tree / "calc").mkdir(parents=True)
    (tree / "calc" / "__init__.py").write_text(plans.INIT)
    (tree / "calc" / "ops.py").write_text(plans.OPS_GOOD)
    return tree


@pytest.mark.parametrize("kind", ["bwrap", "docker"])
def test_a_read_only_root_grown_over_the_caps_fails_the_command_not_the_sandbox(tmp_path, kind):
    if kind == "docker" and not docker_engine():
        pytest.skip("no Docker engine running here")
    tree = candidate(tmp_path / "cand")
    boundary = Boundary(name="verifier", mounts=[*python_mounts(), Mount(host=tree, inside="/app")], workdir="/app")
    sandbox = make_sandbox(kind, boundary)
    try:
        assert sandbox.exec("ls /app").stdout.split() == ["calc"]
        grow(tree)
        refused = sandbox.exec("echo ran")
        assert refused.returncode == 125 and "ran" not in refused.stdout and not refused.ok
        assert refused.stderr.count("\n") == 1 and REFUSAL in refused.stderr, refused.stderr
        assert str(tmp_path) not in refused.stderr + (refused.exceeded or "")
        shutil.rmtree(tree / "junk")
        assert sandbox.exec("echo ran").stdout.strip() == "ran"
    finally:
        sandbox.close()


def test_twin_migrate_finishes_and_grades_when_the_migrator_grows_app_over_the_caps(tmp_path):
    replies = [
        plans.diagnose(),
        *plans.migrate(plans.OPS_GOOD)[:2],
        call("bash", command=GROW + " && echo made"),
        call("bash_reference", command="echo hi"),
        call("submit", summary="wrote calc and junk"),
        *plans.verify_with_new_probe(),
        plans.diagnose(),
        call("bash", command="rm -rf /app/junk"),
        call("bash_reference", command="echo back"),
        call("submit", summary="removed the junk"),
        *plans.verify_again(),
    ]
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, rounds=2)
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert state.status == "finished", state.stop_reason
    grades = json.loads(run.grades.read_text())
    assert [g["round"] for g in grades["rounds"]] == [1, 2]
    assert all(g["reward"] is not None for g in grades["rounds"])
    records = [r for r in Trajectory(run.trajectory).records() if isinstance(r, ToolCallRecord)]
    made = next(r for r in records if r.tool == "bash" and "made" in r.result)
    assert made.ok, "a writable root over the caps still takes the Migrator's command"
    first, second = [r for r in records if r.tool == "bash_reference"]
    if unavailable(EXT4) is None:  # the run's candidate is a filesystem of its own, bound as it is: no snapshot
        assert first.ok and "hi" in first.result, first.result
    else:
        assert not first.ok and REFUSAL in first.result and str(tmp_path) not in first.result
    assert second.ok and "back" in second.result
    spec = TrialSpec(task=plans.TINY_TASK, model="scripted", scaffold="twin", seed=0)
    trial = collect_trial(spec, run.root, returncode=0, attempts=1, rounds=2)
    assert trial.status == "ok" and set(trial.rewards) == {1, 2}


def test_a_probe_side_whose_candidate_grew_over_the_caps_is_violated(tmp_path):
    tree = candidate(tmp_path / "cand")
    probe = tmp_path / "calc_ops.py"
    probe.write_text(plans.PROBE)
    with make_context(load_task(plans.TINY_TASK), tree, sandbox_kind="bwrap", workdir=tmp_path / "work") as ctx:
        (before,) = probe_file_probe(str(probe))(ctx)
        assert before.outcome is Outcome.ESTABLISHED, before.trace
        grow(tree)
        (after,) = probe_file_probe(str(probe))(ctx)
        imports, _independence = imports_check()(ctx)
    for result in (after, imports):
        assert result.outcome is Outcome.VIOLATED, (result.property.id, result.observations, result.trace)
        assert "holds more than" in result.trace and "(candidate)" in result.observations["message"]


def test_a_grader_whose_candidate_grew_over_the_caps_scores_zero(tmp_path, monkeypatch):
    task = load_task(plans.TINY_TASK)
    tree = candidate(tmp_path / "cand")
    build = grader.make_sandbox

    def built_then_grown(kind, boundary):
        sandbox = build(kind, boundary)
        grow(tree)  # the candidate's tree changes once the grader's sandbox holds its snapshot
        return sandbox

    monkeypatch.setattr(grader, "make_sandbox", built_then_grown)
    grade = grader.run_grader(task, tree, sandbox="bwrap")
    assert grade.reward == 0.0 and "holds more than" in (grade.error or ""), grade
