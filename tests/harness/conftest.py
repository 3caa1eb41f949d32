"""Fixtures of the harness's tests that more than one module uses."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def stage(monkeypatch):
    """The runs' capped-filesystem records and images: a stage of the test's own, where the sandbox
    uid can reach it (not under pytest's 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="twin-stop-stage-", dir="/tmp"))
    os.chmod(path, 0o711)
    monkeypatch.setenv("TWIN_STAGE_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)
