"""The static audit on flask-to-starlette candidates: Flask imports and proxies are flagged."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import TASKS_DIR

audit = pytest.importorskip(
    "probes.audit", reason="the static migration audit (probes/audit.py) is not there yet"
)

TASK = TASKS_DIR / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"
SOURCE = TASK / "environment" / "source"
FORBIDDEN = ["flask", "werkzeug"]

CHEATS = {
    "imports-flask": ("shim.py", "from flask import Flask\n", "forbidden_import"),
    "imports-werkzeug-dynamically": (
        "shim.py",
        "import importlib\nimportlib.import_module('werkzeug.http')\n",
        "forbidden_import",
    ),
    "proxies-to-source": (
        "proxy.py",
        "import sys\nsys.path.insert(0, '/source')\nfrom app import app as original\n",
        "loads_original",
    ),
    "serves-the-original": (
        "run.py",
        "import subprocess\nsubprocess.Popen(['flask', '--app', '/source/app', 'run'])\n",
        "loads_original",
    ),
}


def test_oracle_has_no_findings():
    assert audit.audit_candidate(ORACLE, SOURCE, forbidden=FORBIDDEN) == []


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_are_flagged(name, tmp_path):
    filename, text, kind = CHEATS[name]
    candidate = tmp_path / "candidate"
    shutil.copytree(ORACLE, candidate, ignore=shutil.ignore_patterns("__pycache__"))
    (candidate / filename).write_text(text)
    findings = audit.audit_candidate(candidate, SOURCE, forbidden=FORBIDDEN)
    assert kind in {f.kind for f in findings}, findings


def test_untouched_original_is_flagged(tmp_path):
    """Handing the original back unchanged is not a migration."""
    candidate = tmp_path / "candidate"
    shutil.copytree(SOURCE, candidate, ignore=shutil.ignore_patterns("__pycache__"))
    kinds = {f.kind for f in audit.audit_candidate(candidate, SOURCE, forbidden=FORBIDDEN)}
    assert "forbidden_import" in kinds
