"""Every path that runs probes removes the work directory it made, also when a probe is interrupted."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.cli.probe
import harness.scaffolds.twin.probe_desk
import probes.suite
from evidence_store.records import Outcome
from evidence_store.store import EvidenceStore
from harness.cli.app import main
from harness.scaffolds.twin.probe_desk import RunProbeDesk
from task_model.loader import load_task
from tests.conftest import REPO_ROOT

FIXTURES = Path(__file__).resolve().parents[1] / "probes" / "fixtures"
TINY = FIXTURES / "tiny"
GOOD = FIXTURES / "candidates" / "good"


def _interrupting(ctx):
    (ctx.workdir / "partial.txt").write_text("half done")
    raise KeyboardInterrupt


@pytest.fixture
def interrupted_checks(monkeypatch):
    """The built-in checks replaced by a probe that is interrupted half-way."""
    for module in (probes.suite, harness.scaffolds.twin.probe_desk, harness.cli.probe):
        monkeypatch.setattr(module, "builtin_checks", lambda task: [_interrupting])


def _desk(tmp_path, store) -> RunProbeDesk:
    return RunProbeDesk(
        load_task(TINY), GOOD, tmp_path / "probes", store, run_id="r1", sandbox_kind="none", audit_log=None
    )


def test_the_verifier_desk_removes_its_work_directories(probe_workdirs, tmp_path):
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        desk = _desk(tmp_path, store)
        assert "ESTABLISHED" in desk.run_checks()
        records = desk.rerun_all()
    assert records and probe_workdirs and not any(path.exists() for path in probe_workdirs)


def test_the_verifier_desk_removes_its_work_directory_when_interrupted(probe_workdirs, tmp_path, interrupted_checks):
    with EvidenceStore(tmp_path / "evidence.sqlite") as store, pytest.raises(KeyboardInterrupt):
        _desk(tmp_path, store).run_checks()
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


def test_twin_probe_removes_its_work_directory(probe_workdirs, capsys):
    assert main(["probe", "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--json"]) == 0
    assert '"established"' in capsys.readouterr().out
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


def test_twin_probe_removes_its_work_directory_when_interrupted(probe_workdirs, interrupted_checks, capsys):
    main(["probe", "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--no-library"])
    assert capsys.readouterr().out == ""  # interrupted before any result was shown
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


def test_the_bench_post_run_checks_remove_their_work_directory(probe_workdirs, monkeypatch, tmp_path):
    import harness.bench.checks
    import harness.run.candidate_repo

    run = SimpleNamespace(candidate=tmp_path / "c", candidate_git=tmp_path / "g",
                          load_state=lambda: SimpleNamespace(final_round=1))
    monkeypatch.setattr(harness.bench.checks, "RunDir", lambda run_dir: run)

    def export(self, round, dest):
        shutil.copytree(GOOD, dest)
        return dest

    monkeypatch.setattr(harness.run.candidate_repo.CandidateRepo, "export", export)
    assert harness.bench.checks.post_run_failures(load_task(TINY), tmp_path / "run", "none") == []
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


def test_the_probe_benchmark_removes_its_work_directory(probe_workdirs, tmp_path):
    loaded = importlib.util.spec_from_file_location("probe_benchmark", REPO_ROOT / "benchmarks" / "probes.py")
    benchmark = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(benchmark)
    args = argparse.Namespace(sandbox="none", jobs=1)
    with benchmark.timed_suite(load_task(TINY), GOOD, args, tmp_path / "cache") as (suite, wall):
        assert wall > 0 and all(r.outcome is not Outcome.VIOLATED for r in suite.results)
        assert suite.ctx.workdir.is_dir()
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()
