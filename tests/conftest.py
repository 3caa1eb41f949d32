"""Shared fixtures. Tests never need a network, a model endpoint, a Docker engine or a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO_ROOT / "tasks"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def docker_engine() -> bool:
    """Whether a Docker engine answers here (tests that need one skip in one line without it)."""
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.fixture
def probe_workdirs(monkeypatch, tmp_path) -> list[Path]:
    """Every probe work directory twin makes during the test (made under tmp_path, recorded here)."""
    import probes.context

    made: list[Path] = []

    def scratch_dir(prefix: str) -> Path:
        path = tmp_path / f"{prefix}{len(made)}"
        path.mkdir()
        made.append(path)
        return path

    monkeypatch.setattr(probes.context, "scratch_dir", scratch_dir)
    return made


@pytest.fixture(autouse=True)
def _quiet_waits(monkeypatch):
    """A loaded machine makes ordinary steps last over 2 s, and `ground.waiting` would then add its progress
    lines to what a test reads; tests of those lines set their own notice (tests/ground/test_waiting.py)."""
    monkeypatch.setenv("TWIN_WAIT_NOTICE_S", "3600")


@pytest.fixture(autouse=True)
def _skip_task_check(monkeypatch):
    """`twin migrate` and `twin bench` check their task first (benchmark_adapter.grading.check); tests of
    anything else skip that (tests/benchmark_adapter/test_check.py removes this to test it)."""
    monkeypatch.setenv("TWIN_SKIP_TASK_CHECK", "1")
