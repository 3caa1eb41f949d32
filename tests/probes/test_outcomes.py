"""The one rule that turns a crash's blame into an outcome, for matched probes and checks alike."""

from __future__ import annotations

import pytest

from evidence_store.records import Outcome, Property
from ground.sandbox import ExecResult
from probes.driver import STARTED
from probes.outcomes import crash_outcome, crash_result, ended_blame, record_blame

PROP = Property(id="fwd.logits", kind="differential", level=1)
ROOT, PROBE = "/app", "/probe-given/p/probe.py"


@pytest.mark.parametrize(
    ("blame", "outcome"),
    [
        ("candidate", Outcome.VIOLATED),
        ("timeout", Outcome.VIOLATED),
        ("ended", Outcome.VIOLATED),
        ("unknown", Outcome.VIOLATED),
        ("probe", Outcome.NOT_ESTABLISHED),
        ("not_started", Outcome.NOT_ESTABLISHED),
        ("infrastructure", Outcome.NOT_ESTABLISHED),
    ],
)
def test_blame_decides_the_outcome_of_a_crash(blame, outcome):
    assert crash_outcome(blame) is outcome
    run = {"ok": False, "blame": blame, "status": "exit 0", "trace": f"Traceback ... ({blame})"}
    result = crash_result(PROP, run, {"seed": 0}, not_fitting="failed in {blame} code", forbidden_imports=[])
    assert result.outcome is outcome and result.trace == run["trace"] and result.context == {"seed": 0}
    if outcome is Outcome.VIOLATED:
        assert result.score == 0.0 and result.observations["forbidden_imports"] == []
    else:
        assert result.score is None
    if blame in ("candidate", "timeout"):
        assert result.observations["message"] == f"the candidate crashed ({blame})"
    if blame == "ended":
        assert result.observations["message"] == "the candidate side ended without producing its outputs (exit 0)"
    if blame == "probe":
        assert result.observations == {"message": "failed in probe code"}
    if blame == "infrastructure":
        assert "(infrastructure): nothing was examined" in result.observations["message"]


def frames(*files: str) -> list[dict]:
    return [{"file": f, "line": 1, "name": "f"} for f in files]


@pytest.mark.parametrize(
    ("record", "blame"),
    [
        ({"frames": frames("/probe-given/p/driver.py", PROBE)}, "probe"),
        ({"frames": frames(PROBE, "/usr/lib/python3/json/__init__.py")}, "probe"),
        ({"frames": frames(PROBE, "/app/model.py", "/venv/numpy/core.py")}, "candidate"),
        # a probe frame reached from the candidate's code (a callback, a code object named after the probe)
        ({"frames": frames(PROBE, "/app/model.py", PROBE)}, "candidate"),
        ({"frames": frames("/probe-given/p/driver.py")}, "unknown"),
        ({"frames": []}, "unknown"),  # a stripped traceback
        # the record's own claim is never read
        ({"blame": "probe", "frames": frames(PROBE, "/app/jax_repo/model.py")}, "candidate"),
        ({"blame": "probe"}, "unknown"),
        ({"blame": "probe", "frames": "not a list"}, "unknown"),
        ({"blame": "probe", "frames": [3, None, {"file": 7}]}, "unknown"),
        (
            {
                "type": "ModuleNotFoundError",
                "frames": frames(PROBE),
                "forbidden_imports": [{"module": "torch", "importer": {"file": "/app/model.py", "line": 1}}],
            },
            "candidate",
        ),
        (
            {
                "type": "ModuleNotFoundError",
                "frames": frames(PROBE),
                "forbidden_imports": [{"module": "torch", "importer": {"file": PROBE, "line": 3}}],
            },
            "probe",
        ),
    ],
)
def test_an_error_record_is_blamed_from_its_frames(record, blame):
    assert record_blame(record, candidate_root=ROOT, probe_file=PROBE) == blame


def test_on_the_reference_side_no_frame_is_the_candidates():
    record = {"frames": frames(PROBE, "/app/model.py")}
    assert record_blame(record, candidate_root=None, probe_file=PROBE) == "probe"


@pytest.mark.parametrize(
    ("result", "blame", "status"),
    [
        (ExecResult(returncode=0, stdout=f"{STARTED}\n"), "ended", "exit 0"),
        (ExecResult(returncode=-9, stdout=f"{STARTED}\nnoise"), "ended", "signal 9"),
        (ExecResult(returncode=125, stdout=f"{STARTED}\n", exceeded="disk: /probe over"), "ended", "disk: /probe over"),
        (
            ExecResult(returncode=124, stdout=f"{STARTED}\n", timed_out=True, duration_s=30),
            "timeout",
            "timed out after 30s",
        ),
        # the driver never ran: the sandbox or the interpreter failed before any probe or candidate code
        (ExecResult(returncode=1, stderr="bwrap: Can't mount proc"), "not_started", "exit 1"),
        (None, "unknown", "no record"),
    ],
)
def test_a_run_without_a_record_is_blamed_from_how_its_process_ended(result, blame, status):
    assert ended_blame(result) == (blame, status)
