"""A run's inputs (config, state, task) are read or built once, new or resumed; `--rounds` on a finished run."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness.cli.app import main
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.session import RunInputs, open_session
from task_model import loader
from tests.harness import loop_scripts as plans

needs_bwrap = pytest.mark.skipif(
    __import__("shutil").which("bwrap") is None, reason="whole runs use the real bwrap sandbox"
)


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """Count every read of config.json and state.json and every task load, wherever it is called from."""
    counts: Counter = Counter()

    def counting(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    for method in ("load_config", "load_state"):
        monkeypatch.setattr(RunDir, method, counting(method, getattr(RunDir, method)))
    # every load of a task directory parses it through the loader's read_task
    monkeypatch.setattr(loader, "read_task", counting("read_task", loader.read_task))
    return counts


def migrate_base(tmp_path, *extra: str) -> int:
    script = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    return main(["migrate", "--task", str(plans.TINY_TASK), "--model", script, "--scaffold", "base",
                 "--rounds", "2", "--no-grade", "--runs-dir", str(tmp_path / "runs"), "--run-id", "r", *extra])


@needs_bwrap
def test_a_new_run_is_built_from_its_typed_config_and_reads_nothing_back(tmp_path, reads):
    assert migrate_base(tmp_path) == 0
    assert reads == {"read_task": 1}
    state = RunDir(tmp_path / "runs" / "r").state_path.read_text()
    assert RunState.model_validate_json(state).status == "finished"


@needs_bwrap
def test_a_resumed_run_reads_its_directory_once_and_loads_its_task_once(tmp_path, reads, capsys):
    assert migrate_base(tmp_path) == 0
    reads.clear()
    capsys.readouterr()
    assert main(["migrate", "--resume", "r", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert reads == {"load_config": 1, "load_state": 1, "read_task": 1}
    assert "run directory: " in capsys.readouterr().out


@needs_bwrap
def test_a_run_whose_config_has_the_flat_version_1_layout_resumes(tmp_path, capsys):
    assert migrate_base(tmp_path) == 0
    run = RunDir(tmp_path / "runs" / "r")
    written = json.loads(run.config_path.read_text())
    model = written.pop("model")
    flat = {"model": model["name"], "api_base": model["api_base"], "temperature": model["temperature"]}
    flat |= {"cache_dir": model["cache_dir"], "model_retries": model["retries"], "model_backoff_s": 0.5}
    run.config_path.write_text(json.dumps({**written, **flat, "model_wait_s": 60.0, "schema_version": 1}))
    capsys.readouterr()
    assert main(["migrate", "--resume", "r", "--runs-dir", str(tmp_path / "runs"), "--model-wait-s", "7"]) == 0
    assert f"run directory: {run.root}" in capsys.readouterr().out
    again = json.loads(run.config_path.read_text())  # written back with the new wait: in the new layout
    assert again["schema_version"] == 2 and again["model"] == {**model, "backoff_s": 0.5, "wait_s": 7.0}
    assert {k: v for k, v in again.items() if k != "model"} == {**written, "schema_version": 2}


@needs_bwrap
def test_resuming_a_finished_run_with_more_rounds_says_it_is_finished_and_changes_nothing(tmp_path, capsys):
    assert migrate_base(tmp_path) == 0
    run = RunDir(tmp_path / "runs" / "r")
    before = {path.name: path.read_bytes() for path in (run.config_path, run.state_path, run.summary)}
    capsys.readouterr()
    assert main(["migrate", "--resume", "r", "--runs-dir", str(tmp_path / "runs"), "--rounds", "5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "run r is finished with 2 of 2 rounds (all 2 rounds done); --rounds 5 does not reopen a finished run: "
        "start a new run for more rounds"
    ]
    assert {path.name: path.read_bytes() for path in (run.config_path, run.state_path, run.summary)} == before


def test_the_session_shares_the_inputs_objects_and_reads_nothing(tmp_path, reads):
    config = RunConfig.build(task=plans.TINY_TASK, model="scripted:" + str(tmp_path / "none.json"))
    task = loader.load_task(plans.TINY_TASK)
    reads.clear()
    inputs = RunInputs.create(tmp_path / "runs", config, task, "r")
    (tmp_path / "none.json").write_text("[]")
    session = open_session(inputs)
    try:
        assert (session.config, session.state, session.task) == (config, inputs.state, task)
        assert session.state is inputs.state and session.task is task
        assert not reads
        assert RunState.model_validate_json(inputs.run.state_path.read_text()) == inputs.state
        assert RunConfig.model_validate_json(inputs.run.config_path.read_text()) == config
    finally:
        session.close()


def test_resumed_inputs_equal_the_new_runs(tmp_path):
    config = RunConfig.build(task=plans.TINY_TASK, model="scripted:x.json", rounds=3)
    task = loader.load_task(plans.TINY_TASK)
    created = RunInputs.create(tmp_path / "runs", config, task, "r")
    resumed = RunInputs.read(RunDir.open("r", tmp_path / "runs"))
    assert (resumed.config, resumed.state, resumed.task.root) == (config, created.state, task.root)


@pytest.mark.skipif(
    __import__("ground.sandboxes.quota", fromlist=["unavailable"]).unavailable("ext4") is not None,
    reason="no capped filesystem can be mounted here (twin not root, or no loop devices)",
)
def test_the_candidate_is_on_a_capped_filesystem_for_the_session_only(tmp_path):
    import os

    from ground.isolation import default_limits

    config = RunConfig.build(task=plans.TINY_TASK, model="scripted:" + str(tmp_path / "none.json"))
    (tmp_path / "none.json").write_text("[]")
    inputs = RunInputs.create(tmp_path / "runs", config, loader.load_task(plans.TINY_TASK), "r")
    session = open_session(inputs)
    candidate = session.workspace.candidate
    try:
        assert os.path.ismount(candidate)
        size = os.statvfs(candidate).f_blocks * os.statvfs(candidate).f_frsize
        assert size <= default_limits().disk_mb << 20
        (candidate / "written.py").write_text("x = 1\n")
    finally:
        session.close()
    assert not os.path.ismount(candidate)
    assert (candidate / "written.py").read_text() == "x = 1\n"
    session.close()  # closing twice changes nothing


@needs_bwrap
def test_a_host_without_room_for_the_capped_candidate_stops_the_run_in_one_line_and_it_resumes(
    tmp_path, capsys, monkeypatch
):
    from ground.sandboxes.host_disk import HostDiskFull
    from harness.run import session as session_module

    real_mount = session_module.CappedRoot.mount

    def no_room(path, cap_mb, kind):
        raise HostDiskFull(f"no room on the host for the capped filesystem of {path}: {cap_mb} MiB needed")

    monkeypatch.setattr(session_module.CappedRoot, "mount", no_room)
    assert migrate_base(tmp_path) != 0
    (last,) = [line for line in capsys.readouterr().err.splitlines() if "no room" in line]
    assert last.startswith("error: no room on the host for the capped filesystem of ")
    monkeypatch.setattr(session_module.CappedRoot, "mount", real_mount)
    assert migrate_base(tmp_path, "--resume", str(tmp_path / "runs" / "r")) == 0
    assert RunDir.open(tmp_path / "runs" / "r").load_state().status == "finished"
