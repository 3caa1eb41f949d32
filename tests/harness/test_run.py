from __future__ import annotations

import json

import pytest

from harness.run.audit import read_refusals
from harness.run.directory import RunConfig, RunDir, RunError, RunState


def config(tmp_path, **kw):
    return RunConfig.build(task=tmp_path / "task", model="scripted:x.json", **kw)


def test_create_writes_whole_config_and_state(tmp_path):
    run = RunDir.create(tmp_path / "runs", config(tmp_path, rounds=3), RunState(run_id="r1"))
    data = json.loads(run.config_path.read_text())
    assert data["rounds"] == 3 and data["schema_version"] == 1
    assert "api_key" not in data
    assert run.load_state().run_id == "r1"
    assert RunDir.open("r1", tmp_path / "runs").root == run.root


def test_existing_run_is_not_overwritten(tmp_path):
    RunDir.create(tmp_path / "runs", config(tmp_path), RunState(run_id="r1"))
    with pytest.raises(RunError, match="already exists"):
        RunDir.create(tmp_path / "runs", config(tmp_path), RunState(run_id="r1"))


def test_bad_settings_and_missing_runs_are_one_line_errors(tmp_path):
    with pytest.raises(RunError, match="bad run setting rounds"):
        config(tmp_path, rounds=0)
    with pytest.raises(RunError, match="no run at nope"):
        RunDir.open("nope", tmp_path)


def test_newer_state_version_is_refused(tmp_path):
    run = RunDir.create(tmp_path / "runs", config(tmp_path), RunState(run_id="r1"))
    state = json.loads(run.state_path.read_text())
    state["schema_version"] = 99
    run.state_path.write_text(json.dumps(state))
    with pytest.raises(RunError, match="newer twin"):
        run.load_state()


def test_model_calls_of_last_completed_step(tmp_path):
    state = RunState(run_id="x")
    state.round_state(1).done = ["diagnose"]
    state.round_state(1).model_calls = 4
    assert state.model_calls == 4


def test_toml_config_with_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run]\nmodel = "openai/x"\nrounds = 4\n[run.budget]\nmax_usd = 2.5\n')
    cfg = RunConfig.from_toml(path, task=tmp_path, rounds=5)
    assert (cfg.model, cfg.rounds, cfg.budget.max_usd) == ("openai/x", 5, 2.5)


def test_refusals_are_read_incrementally(tmp_path):
    log = tmp_path / "audit.log"
    log.write_text('{"action": "write", "target": "/tests"}\n{"action": "re')
    first, offset = read_refusals(log)
    assert first == [{"action": "write", "target": "/tests"}]
    with open(log, "a") as fh:
        fh.write('ad"}\n')
    second, _ = read_refusals(log, offset)
    assert second == [{"action": "read"}]
