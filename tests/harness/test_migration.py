"""`run_migration`: builds the scaffold its config names from the factories it is handed, and sorts how it ended."""

from __future__ import annotations

import pytest

from ground.errors import InfraFailure, Interrupted, StopSignal
from ground.model import ModelInfraError
from harness.models.scripted import ScriptExhausted
from harness.run.directory import RunConfig, RunDir
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from task_model.loader import load_task
from tests.harness import loop_scripts as plans


def inputs(tmp_path, scaffold: str = "base") -> RunInputs:
    script = plans.write_script(tmp_path / "script.json", [])
    config = RunConfig.build(task=plans.TINY_TASK, model=script, scaffold=scaffold, sandbox="none", grade=False)
    return RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")


def scaffold_that(ends):
    """A scaffold factory whose `run()` calls `ends(session)`; the sessions it was built with are kept."""
    built = []

    class Fake:
        def __init__(self, session, progress) -> None:
            built.append(session)
            self.session = session

        def run(self) -> None:
            ends(self.session)

    return Fake, built


def finished(session) -> None:
    session.state.status, session.state.stop_reason = "finished", "done by the fake"
    session.save()


def test_the_config_names_the_scaffold_built_from_the_factories_handed_in(tmp_path):
    run = inputs(tmp_path, scaffold="mini-swe-agent")
    chosen, built = scaffold_that(finished)
    other, not_built = scaffold_that(finished)
    line = run_migration(run, {"mini-swe-agent": chosen, "base": other, "twin": other})
    assert len(built) == 1 and not not_built
    assert line.startswith("run r: done by the fake; final candidate round None, not graded")
    assert run.run.load_state().status == "finished" and run.run.summary.is_file()


def test_a_bug_of_twins_own_is_recorded_as_a_crash_and_the_run_still_ends(tmp_path):
    run = inputs(tmp_path)

    def bug(session) -> None:
        raise RuntimeError("a bug of twin's own")

    fake, _ = scaffold_that(bug)
    line = run_migration(run, {"base": fake})
    state = run.run.load_state()
    assert state.status == "failed" and state.stop_reason == "error: RuntimeError: a bug of twin's own"
    assert "a bug of twin's own" in (run.run.root / "crash.txt").read_text() and run.run.summary.is_file()
    assert line.startswith("run r: error: RuntimeError")


def test_an_infrastructure_failure_is_saved_resumable_and_raised(tmp_path):
    run = inputs(tmp_path)

    def provider_down(session) -> None:
        raise ModelInfraError("503 from the provider")

    fake, _ = scaffold_that(provider_down)
    with pytest.raises(InfraFailure, match=r"503 from the provider \(infrastructure; resume with: twin migrate"):
        run_migration(run, {"base": fake})
    state = run.run.load_state()
    assert state.status == "failed" and state.stop_reason == "infrastructure: 503 from the provider"
    assert not (run.run.root / "crash.txt").exists()


def test_a_stop_the_user_must_act_on_is_saved_as_it_is_and_raised(tmp_path):
    run = inputs(tmp_path)

    def script_ran_out(session) -> None:
        raise ScriptExhausted("the script has no reply 1")

    fake, _ = scaffold_that(script_ran_out)
    with pytest.raises(ScriptExhausted):
        run_migration(run, {"base": fake})
    state = run.run.load_state()
    assert state.status == "running" and not (run.run.root / "crash.txt").exists()


@pytest.mark.parametrize("ends", ["failed", "finished"])
def test_twin_migrate_exits_non_zero_whenever_the_run_ends_failed(tmp_path, monkeypatch, ends):
    from ground.errors import RunFailed
    from harness.cli import migrate as migrate_cli
    from harness.cli.app import main

    def bug(session) -> None:
        raise RuntimeError("a bug of twin's own")

    fake, _ = scaffold_that(bug if ends == "failed" else finished)
    monkeypatch.setattr(migrate_cli, "SCAFFOLDS", {"base": fake})
    script = plans.write_script(tmp_path / "script.json", [])
    code = main(["migrate", "--task", str(plans.TINY_TASK), "--model", script, "--scaffold", "base",
                 "--sandbox", "none", "--no-grade", "--skip-task-check", "--runs-dir", str(tmp_path / "runs"),
                 "--run-id", "r"])  # fmt: skip
    state = RunDir(tmp_path / "runs" / "r").load_state()
    assert state.status == ends
    assert code == (RunFailed.exit_code if ends == "failed" else 0) and RunFailed.exit_code != 0


@pytest.mark.parametrize(
    ("stop", "reason"),
    [(KeyboardInterrupt(), "interrupted"), (StopSignal("SIGTERM"), "stopped by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_run_is_saved_stopped_with_what_stopped_it(tmp_path, stop, reason):
    run = inputs(tmp_path)

    def stopped(session) -> None:
        raise stop

    fake, _ = scaffold_that(stopped)
    with pytest.raises(Interrupted, match=rf"^{reason}; continue with: twin migrate --resume "):
        run_migration(run, {"base": fake})
    state = run.run.load_state()
    assert state.status == "stopped" and state.stop_reason == reason
