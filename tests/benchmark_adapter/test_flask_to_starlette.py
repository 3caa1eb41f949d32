"""The flask-to-starlette task: it loads, its oracle earns full reward, its grader has teeth.

The grader is run exactly as shipped (tests/test.sh) on the oracle, on every seeded
defect (the full sweep is slow; a fast subset runs by default), and on candidates
that did not migrate (still Flask, vendored Flask, proxying to /source).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects
from task_model.loader import load_task
from tests.conftest import TASKS_DIR, requires_bwrap

TASK = TASKS_DIR / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"
FAST_DEFECTS = {"redirect-307", "user-cookie-httponly"}


def _defects():
    path = Path(__file__).parent / "defects" / "flask_to_starlette.py"
    return load_defects(path)


DEFECTS = _defects()


def grade(candidate: Path, logs: Path) -> dict:
    env = {
        **os.environ,
        "TESTS_DIR": str(TASK / "tests"),
        "APP_DIR": str(candidate),
        "LOGS_DIR": str(logs),
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", str(TASK / "tests" / "test.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((logs / "reward.json").read_text())


def test_task_loads_with_its_frameworks():
    task = load_task(TASK)
    assert task.settings.source_framework == "flask"
    assert task.settings.target_framework == "starlette"
    assert task.settings.forbidden_packages == ["flask", "werkzeug"]
    assert task.settings.reference_packages == ["flask"]
    assert (task.source_dir / "app.py").is_file()
    assert task.solution_dir is not None and (task.solution_dir / "solve.sh").is_file()


def test_cases_and_recorded_answers_match():
    cases = json.loads((TASK / "tests" / "cases.json").read_text())
    refs = json.loads((TASK / "tests" / "refs" / "responses.json").read_text())
    assert len(cases) >= 60
    assert {c["name"] for c in cases} == set(refs)
    statuses = {refs[c["name"]]["status"] for c in cases}
    assert {200, 201, 302, 400, 401, 404, 405, 415, 500} <= statuses


def test_recorded_answers_are_the_originals(tmp_path):
    """Re-recording from the original reproduces the stored references (except absolute times)."""
    copy = tmp_path / "task"
    shutil.copytree(TASK, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, str(copy / "tests" / "record_refs.py")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    fresh = json.loads((copy / "tests" / "refs" / "responses.json").read_text())
    stored = json.loads((TASK / "tests" / "refs" / "responses.json").read_text())

    def stable(answer):
        headers = [
            (k, v.split("Expires=")[0])
            for k, v in answer["headers"]
            if k.lower() not in ("date", "server")
        ]
        return answer["status"], headers, answer["body"]

    assert {n: stable(a) for n, a in fresh.items()} == {n: stable(a) for n, a in stored.items()}


def test_oracle_earns_full_reward(tmp_path):
    result = grade(ORACLE, tmp_path / "logs")
    assert result["reward"] == 1.0
    assert result["components"]["migration_audit"] == 1.0
    assert result["components"]["cases_passed"] == result["components"]["cases"]
    details = json.loads((tmp_path / "logs" / "details.json").read_text())
    assert details["failures"] == {} and details["audit"] == []


@pytest.mark.parametrize(
    "defect",
    [
        pytest.param(d, id=d.name, marks=() if d.name in FAST_DEFECTS else pytest.mark.slow)
        for d in DEFECTS
    ],
)
def test_grader_catches_seeded_defect(defect, tmp_path):
    candidate = apply_defect(ORACLE, defect, tmp_path / "candidate")
    result = grade(candidate, tmp_path / "logs")
    assert result["components"]["migration_audit"] == 1.0
    assert result["reward"] < 1.0, f"{defect.name} went unnoticed"


def test_enough_defects():
    assert len(DEFECTS) >= 10
    assert len({d.name for d in DEFECTS}) == len(DEFECTS)


def _variant(tmp_path: Path, edit) -> Path:
    candidate = tmp_path / "candidate"
    shutil.copytree(ORACLE, candidate, ignore=shutil.ignore_patterns("__pycache__"))
    edit(candidate)
    return candidate


NOT_MIGRATED = {
    "imports-flask": lambda c: (c / "extra.py").write_text("from flask import Flask\n"),
    "imports-werkzeug-dynamically": lambda c: (c / "extra.py").write_text(
        "import importlib\nhttp = importlib.import_module('werkzeug.http')\n"
    ),
    "lists-flask": lambda c: (c / "requirements.txt").write_text("starlette\nFlask==3.0\n"),
    "vendors-flask": lambda c: (
        (c / "flask").mkdir(),
        (c / "flask" / "__init__.py").write_text(""),
    ),
    "proxies-to-source": lambda c: (c / "proxy.py").write_text(
        "import sys\nsys.path.insert(0, '/source')\nimport starlette\n"
    ),
    "wraps-wsgi": lambda c: (c / "bridge.py").write_text(
        "from starlette.middleware.wsgi import WSGIMiddleware\n"
    ),
}


@pytest.mark.parametrize("name", sorted(NOT_MIGRATED))
def test_audit_vetoes_candidates_that_did_not_migrate(name, tmp_path):
    sys.path.insert(0, str(TASK / "tests"))
    try:
        from grade import audit
    finally:
        sys.path.remove(str(TASK / "tests"))
    candidate = _variant(tmp_path, NOT_MIGRATED[name])
    assert audit(ORACLE) == []
    assert audit(candidate), f"{name} passed the migration audit"


def test_grader_vetoes_a_flask_import_end_to_end(tmp_path):
    candidate = _variant(tmp_path, NOT_MIGRATED["imports-flask"])
    result = grade(candidate, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert result["components"]["migration_audit"] == 0.0


def test_flask_is_absent_when_the_candidate_runs(tmp_path):
    """An import hidden from the audit still fails: Flask is not installed where the candidate runs."""

    def sneak(c: Path) -> None:
        text = (c / "app.py").read_text()
        (c / "app.py").write_text(
            text + "\nimport importlib\nimportlib.import_module('fla' + 'sk')\n"
        )

    result = grade(_variant(tmp_path, sneak), tmp_path / "logs")
    log = json.loads((tmp_path / "logs" / "details.json").read_text())["server_log_tail"]
    assert "No module named" in log and "flask" in log
    assert result["components"]["migration_audit"] == 1.0
    assert result["components"]["cases_passed"] == 0
    assert result["reward"] == 0.0


@requires_bwrap
def test_candidate_cannot_read_the_references(tmp_path):
    """A candidate that looks for the grader's files finds nothing (nested sandbox)."""

    def peek(c: Path) -> None:
        text = (c / "app.py").read_text()
        host_refs = str(TASK / "tests" / "refs" / "responses.json")
        probe = (
            "import os as _os\n"
            f"_SEEN = [p for p in ('/tests/refs/responses.json', {host_refs!r}) if _os.path.exists(p)]\n"
            "assert not _SEEN, _SEEN\n"
        )
        (c / "app.py").write_text(text + "\n" + probe)

    result = grade(_variant(tmp_path, peek), tmp_path / "logs")
    assert result["isolation"] == "bwrap"
    assert result["reward"] == 1.0


def test_missing_candidate_scores_zero(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = grade(empty, tmp_path / "logs")
    assert result["reward"] == 0.0
    assert "missing" in " ".join(
        json.loads((tmp_path / "logs" / "details.json").read_text())["audit"]
    )
