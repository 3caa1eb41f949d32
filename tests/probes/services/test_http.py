"""HTTP probes on the Bookshop task: both services on loopback, same requests, raw answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmark_adapter.grading.defects import apply_defect
from evidence_store.records import Outcome
from probes.context import make_context
from probes.services.http import HttpRequest, http_probe, service_sides
from task_model.loader import load_task
from tests.conftest import TASKS_DIR, requires_bwrap
from tests.probes.services.test_strategies import bookshop_defect

TASK = TASKS_DIR / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"
SIDES = service_sides(
    ["{python}", "-m", "flask", "--app", "app", "run", "--port", "{port}"],
    ["{python}", "-m", "uvicorn", "app:app", "--port", "{port}", "--log-level", "warning"],
    startup_s=90,
)
REQUESTS = {
    "index-json": HttpRequest(headers=[("Accept", "application/json")]),
    "trailing-slash": HttpRequest(target="/books/"),
    "login": HttpRequest(
        method="POST",
        target="/login",
        body="username=ann&password=hunter2",
        headers=[("Content-Type", "application/x-www-form-urlencoded")],
    ),
}


def run(candidate, tmp_path, sandbox="none", requests=REQUESTS):
    ctx = make_context(
        load_task(TASK), candidate, sandbox_kind=sandbox, workdir=tmp_path / "work", timeout_s=180
    )
    try:
        return {r.property.id: r for r in http_probe(SIDES, requests)(ctx)}
    finally:
        ctx.close()


def test_oracle_answers_like_the_original(tmp_path):
    results = run(ORACLE, tmp_path)
    assert {r.outcome for r in results.values()} == {Outcome.ESTABLISHED}
    login = results["http:login"].observations["reference"]
    assert login["status"] == 302
    assert any(k == "Set-Cookie" and v.startswith("user=ann") for k, v in login["headers"])


def test_redirected_trailing_slash_is_violated(tmp_path):
    candidate = apply_defect(ORACLE, bookshop_defect("redirect-slashes"), tmp_path / "cand")
    results = run(candidate, tmp_path)
    assert results["http:trailing-slash"].outcome == Outcome.VIOLATED
    assert results["http:trailing-slash"].observations["differences"][0] == "status: 404 != 307"
    assert results["http:index-json"].outcome == Outcome.ESTABLISHED


def test_candidate_service_that_does_not_start_is_violated(tmp_path):
    candidate = tmp_path / "broken"
    candidate.mkdir()
    (candidate / "app.py").write_text("raise RuntimeError('no app here')\n")
    results = run(candidate, tmp_path, requests={"index": HttpRequest()})
    assert results["http:index"].outcome == Outcome.VIOLATED
    assert "no app here" in results["http:index"].observations["reason"]


@requires_bwrap
@pytest.mark.slow
def test_in_bwrap_flask_is_absent_on_the_candidate_side(tmp_path):
    candidate = tmp_path / "still-flask"
    candidate.mkdir()
    (candidate / "app.py").write_text(
        "from flask import Flask\nfrom starlette.applications import Starlette\napp = Starlette()\n"
    )
    results = run(candidate, tmp_path, sandbox="bwrap", requests={"index": HttpRequest()})
    assert results["http:index"].outcome == Outcome.VIOLATED
    assert "No module named 'flask'" in results["http:index"].observations["reason"]
    oracle = run(ORACLE, tmp_path / "o", sandbox="bwrap", requests={"index": HttpRequest()})
    assert oracle["http:index"].outcome == Outcome.ESTABLISHED


def graded_requests() -> dict[str, HttpRequest]:
    """The grader's recorded requests (read here by the test suite, never by a probe)."""
    cases = json.loads((TASK / "tests" / "cases.json").read_text())
    return {
        c["name"]: HttpRequest(
            method=c["method"], target=c["target"], headers=c["headers"], body=c.get("body")
        )
        for c in cases
    }


def test_probes_establish_every_graded_behaviour_of_the_oracle(tmp_path):
    results = run(ORACLE, tmp_path, requests=graded_requests())
    assert len(results) >= 60
    assert {r.outcome for r in results.values()} == {Outcome.ESTABLISHED}


@pytest.mark.parametrize(
    "name", ["user-cookie-httponly", pytest.param("form-charset-parameter", marks=pytest.mark.slow)]
)
def test_probes_and_grader_flag_the_same_cases(name, tmp_path):
    candidate = apply_defect(ORACLE, bookshop_defect(name), tmp_path / "cand")
    flagged = {
        k.split(":", 1)[1]
        for k, r in run(candidate, tmp_path, requests=graded_requests()).items()
        if r.outcome == Outcome.VIOLATED
    }
    env = {
        **os.environ,
        "TESTS_DIR": str(TASK / "tests"),
        "APP_DIR": str(candidate),
        "LOGS_DIR": str(tmp_path / "logs"),
        "PYTHON": sys.executable,
    }
    subprocess.run(
        ["bash", str(TASK / "tests" / "test.sh")],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    failed = set(json.loads((tmp_path / "logs" / "details.json").read_text())["failures"])
    assert flagged and flagged == failed
