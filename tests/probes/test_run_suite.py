"""`run_suite` and the rerun of a record: the probe context is closed and its work directory removed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from probe_fixtures import CANDIDATES, TINY

from evidence_store.records import EvidenceRecord, Outcome, ProbeResult, Property
from evidence_store.store import EvidenceStore
from probes.checks import imports_check
from probes.rerun import rerun_record
from probes.suite import run_suite
from task_model.loader import load_task
from tests.conftest import requires_bwrap

PROP = Property(id="wrote", kind="check")


def _writing(ctx) -> list[ProbeResult]:
    (ctx.workdir / "probe-output.txt").write_text("kept only while the suite runs")
    return [ProbeResult(property=PROP, outcome=Outcome.ESTABLISHED)]


def _raising(exc: BaseException):
    def probe(ctx) -> list[ProbeResult]:
        (ctx.workdir / "partial.txt").write_text("half done")
        raise exc

    return probe


def test_the_work_directory_lives_for_the_block_and_goes_after_it(probe_workdirs):
    with run_suite(load_task(TINY), CANDIDATES / "good", [_writing], sandbox_kind="none") as suite:
        assert (suite.ctx.workdir / "probe-output.txt").is_file()
        assert [r.outcome for r in suite.results] == [Outcome.ESTABLISHED]
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


def test_a_probe_that_raises_is_a_result_and_the_work_directory_still_goes(probe_workdirs):
    with run_suite(load_task(TINY), CANDIDATES / "good", [_raising(RuntimeError("bug"))], sandbox_kind="none") as suite:
        [result] = suite.results
    assert result.outcome is Outcome.NOT_ESTABLISHED and "RuntimeError: bug" in result.observations["message"]
    assert not probe_workdirs[0].exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_interrupt_removes_the_work_directory(probe_workdirs, jobs):
    with pytest.raises(KeyboardInterrupt):
        with run_suite(load_task(TINY), CANDIDATES / "good", [_writing, _raising(KeyboardInterrupt())], jobs=jobs,
                       sandbox_kind="none"):
            pass
    assert len(probe_workdirs) == 1 and not probe_workdirs[0].exists()


@pytest.fixture
def python_sigint_handler():
    """Python's Ctrl-C handler, also where the tests were started with SIGINT ignored (`pytest &` in a script)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_parallel_suite_starts_no_further_probes(probe_workdirs, python_sigint_handler):
    started = []

    def interrupted(ctx):
        started.append("interrupted")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the main thread while it waits
        time.sleep(1)
        return []

    def slow(ctx):
        started.append("slow")
        time.sleep(1)
        return []

    def late(ctx):
        started.append("late")
        return []

    with pytest.raises(KeyboardInterrupt):
        with run_suite(load_task(TINY), CANDIDATES / "good", [interrupted, slow, late], jobs=2, sandbox_kind="none"):
            pass
    assert "late" not in started and not probe_workdirs[0].exists()


def test_an_error_inside_the_block_removes_the_work_directory(probe_workdirs):
    with pytest.raises(ValueError, match="caller"):
        with run_suite(load_task(TINY), CANDIDATES / "good", [_writing], sandbox_kind="none"):
            raise ValueError("the caller failed")
    assert not probe_workdirs[0].exists()


def test_a_work_directory_the_caller_named_or_kept_stays(probe_workdirs, tmp_path):
    named = tmp_path / "named"
    with run_suite(load_task(TINY), CANDIDATES / "good", [_writing], sandbox_kind="none", workdir=named):
        pass
    assert (named / "probe-output.txt").is_file() and probe_workdirs == []
    with run_suite(load_task(TINY), CANDIDATES / "good", [_writing], sandbox_kind="none", keep=True) as suite:
        pass
    assert (suite.ctx.workdir / "probe-output.txt").is_file()


def test_a_rerun_runs_in_a_fresh_context_and_removes_its_work_directory(probe_workdirs, tmp_path):
    with run_suite(load_task(TINY), CANDIDATES / "good", [imports_check()], sandbox_kind="none") as suite:
        first = next(r for r in suite.results if r.property.id == "imports")
    assert first.outcome is Outcome.ESTABLISHED
    first.context["rerun"].update(task=str(TINY), candidate=str(CANDIDATES / "good"))
    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        rid = store.append(EvidenceRecord.from_result(first, run_id="r1", round=1))
        again = rerun_record(store, rid, round=2)
        crashy = rerun_record(store, rid, round=3, candidate=CANDIDATES / "crashy")
    assert again.outcome is Outcome.ESTABLISHED and again.context["rerun_of"] == rid
    assert again.context["sandbox"] == "none"
    assert crashy.context["rerun"]["candidate"] == str(CANDIDATES / "crashy")
    assert len(probe_workdirs) == 3 and not any(path.exists() for path in probe_workdirs)


@requires_bwrap
def test_probes_run_at_once_share_each_sides_capped_work_directory(request, monkeypatch, caplog):
    """With --jobs, the first probes of a suite ask for a side's sandbox at the same moment: each side's
    work directory is capped once and shared (no 'cannot put ... on a capped tmpfs'), and every result
    is what the candidate earns."""
    from probe_fixtures import FIXTURES

    from ground.sandboxes.quota import TMPFS, unavailable
    from probes.differential import differential_probe

    if unavailable(TMPFS) is not None:
        pytest.skip(f"cannot mount a capped filesystem here: {unavailable(TMPFS)}")
    import shutil
    import tempfile

    # the probe's scratch (and its tmpfs) apart from others', where the sandbox's uid can reach it
    stage = Path(tempfile.mkdtemp(prefix="twin-stage-jobs-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(stage, ignore_errors=True))
    os.chmod(stage, 0o711)
    monkeypatch.setenv("TWIN_STAGE_DIR", str(stage))
    probes = [differential_probe(str(FIXTURES / "probe_numpy.py"), name) for name in ("affine", "net", "labels")]
    suite_probes = [*probes, imports_check()]
    with caplog.at_level("WARNING"):
        with run_suite(load_task(TINY), CANDIDATES / "good", suite_probes, jobs=2, sandbox_kind="bwrap") as suite:
            outcomes = {r.property.id: r.outcome for r in suite.results}
    assert [r.getMessage() for r in caplog.records if "capped" in r.getMessage()] == []
    assert set(outcomes.values()) == {Outcome.ESTABLISHED} and len(outcomes) == 5
    assert not any(str(stage) in line for line in open("/proc/self/mountinfo"))
    assert list((stage / "quota").iterdir()) == []
