"""Taking a side's outputs back: regular files only, never through a link the side made."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from probes.sides import OUTPUT_FILES, HostileOutput, _take_back

SECRET = "SIDES-SECRET-77aa"


@pytest.mark.parametrize("name", ["manifest.json", "error.json", "arrays.npz"])
def test_an_output_linked_to_hidden_files_brings_nothing_back(tmp_path, name):
    hidden = tmp_path / "tests"
    hidden.mkdir()
    (hidden / "refs.json").write_text(json.dumps({"outputs": {"x": SECRET}}))
    np.savez(hidden / "refs.npz", secret=np.array([7.0]))
    side = tmp_path / "side"
    side.mkdir()
    (side / name).symlink_to(hidden / ("refs.npz" if name.endswith(".npz") else "refs.json"))
    with pytest.raises(HostileOutput):
        _take_back(side, tmp_path / "layout", OUTPUT_FILES)
    assert not (tmp_path / "layout" / name).exists()


def test_a_fifo_output_is_refused_without_hanging(tmp_path):
    side = tmp_path / "side"
    side.mkdir()
    os.mkfifo(side / "manifest.json")
    with pytest.raises(HostileOutput):
        _take_back(side, tmp_path / "layout", OUTPUT_FILES)
