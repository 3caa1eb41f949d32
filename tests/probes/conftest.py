from __future__ import annotations

import shutil

import pytest
from probe_fixtures import CANDIDATES


@pytest.fixture()
def candidate_copy(tmp_path):
    """Copy a fixture candidate to a temporary directory (tests may change it)."""

    def copy(name: str):
        dest = tmp_path / name
        shutil.copytree(CANDIDATES / name, dest)
        return dest

    return copy
