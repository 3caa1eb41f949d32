from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny"
CANDIDATES = FIXTURES / "candidates"


@pytest.fixture()
def candidate_copy(tmp_path):
    """Copy a fixture candidate to a temporary directory (tests may change it)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(CANDIDATES / name, dest)
        return dest

    return copy
