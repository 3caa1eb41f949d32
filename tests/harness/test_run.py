from __future__ import annotations

import json

import pytest

from harness.models.config import ModelConfig, ModelKind
from harness.run.audit import read_refusals
from harness.run.directory import RunConfig, RunDir, RunError, RunState


def config(tmp_path, **kw):
    return RunConfig.build(task=tmp_path / "task", model="scripted:x.json", **kw)


def test_create_writes_whole_config_and_state(tmp_path):
    run = RunDir.create(tmp_path / "runs", config(tmp_path, rounds=3), RunState(run_id="r1"))
    data = json.loads(run.config_path.read_text())
    assert data["rounds"] == 3 and data["schema_version"] == 2
    assert data["model"]["name"] == "scripted:x.json" and data["model"]["retries"] == 5
    assert "api_key" not in data and "api_key" not in data["model"]
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
    state.round_state(1).model_calls_total = 4
    state.round_state(2).model_calls_total = 7  # a round with no completed step
    assert state.model_calls_total == 4


def test_toml_config_with_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run]\nmodel = "openai/x"\nrounds = 4\nmodel_retries = 1\n[run.budget]\nmax_usd = 2.5\n')
    cfg = RunConfig.from_toml(path, task=tmp_path, rounds=5)
    assert (cfg.model.name, cfg.model.retries, cfg.rounds, cfg.budget.max_usd) == ("openai/x", 1, 5, 2.5)


def test_toml_model_table_takes_overrides_setting_by_setting(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run.model]\nname = "openai/x"\napi_base = "http://h/v1"\ntemperature = 0.5\n')
    cfg = RunConfig.from_toml(path, task=tmp_path, model={"name": "openai/y", "retries": 0})
    assert cfg.model == ModelConfig(name="openai/y", api_base="http://h/v1", temperature=0.5, retries=0)
    assert cfg.model.kind == ModelKind("litellm", "openai/y")


VERSION_1 = {
    "schema_version": 1,
    "task": "/tasks/t",
    "model": "inbox:/box",
    "scaffold": "base",
    "rounds": 3,
    "seed": 0,
    "api_base": "http://h/v1",
    "temperature": 0.2,
    "budget": {"max_usd": 1.0},
    "sandbox": "none",
    "grade": False,
    "cache_dir": "/cache",
    "model_retries": 1,
    "model_backoff_s": 0.5,
    "model_wait_s": 60.0,
}


def test_a_version_1_config_resumes_with_its_model_settings_in_one_table(tmp_path):
    run = RunDir.create(tmp_path / "runs", config(tmp_path), RunState(run_id="old"))
    run.config_path.write_text(json.dumps(VERSION_1))  # as twin wrote it before the model had its own table
    loaded = run.load_config()
    assert loaded.model == ModelConfig(
        name="inbox:/box",
        api_base="http://h/v1",
        temperature=0.2,
        cache_dir="/cache",
        retries=1,
        backoff_s=0.5,
        wait_s=60.0,
    )
    assert loaded.model.kind == ModelKind("inbox", "/box")
    assert (loaded.scaffold, loaded.rounds, loaded.budget.max_usd, loaded.grade) == ("base", 3, 1.0, False)
    run.write_config(loaded)  # written back (e.g. --model-wait-s on resume): the new layout, read again the same
    assert json.loads(run.config_path.read_text())["schema_version"] == 2
    assert run.load_config() == loaded


def test_a_newer_config_is_refused(tmp_path):
    run = RunDir.create(tmp_path / "runs", config(tmp_path), RunState(run_id="r1"))
    run.config_path.write_text(json.dumps({**VERSION_1, "schema_version": 3}))
    with pytest.raises(RunError, match="newer twin"):
        run.load_config()


def test_a_new_wait_is_checked_and_keeps_the_parsed_name(tmp_path):
    cfg = config(tmp_path)
    waited = cfg.with_model_wait(5)
    assert waited.model.wait_s == 5 and waited.model.kind is cfg.model.kind
    with pytest.raises(RunError, match="bad run setting model.wait_s"):
        cfg.with_model_wait(0)


def test_refusals_are_read_incrementally(tmp_path):
    log = tmp_path / "audit.log"
    log.write_text('{"action": "write", "target": "/tests"}\n{"action": "re')
    first, offset = read_refusals(log)
    assert first == [{"action": "write", "target": "/tests"}]
    with open(log, "a") as fh:
        fh.write('ad"}\n')
    second, _ = read_refusals(log, offset)
    assert second == [{"action": "read"}]
