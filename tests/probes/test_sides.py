"""Reading a side's outputs: regular files only, never through a link the side made."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from probes.sides import _read_run

SECRET = "SIDES-SECRET-77aa"


@pytest.mark.parametrize("name", ["manifest.json", "error.json", "arrays.npz"])
def test_an_output_linked_to_hidden_files_brings_nothing_into_evidence(tmp_path, name):
    hidden = tmp_path / "tests"
    hidden.mkdir()
    (hidden / "refs.json").write_text(json.dumps({"outputs": {"x": SECRET}, "blame": SECRET, "trace": SECRET}))
    np.savez(hidden / "refs.npz", secret=np.array([7.0]))
    out = tmp_path / "out"
    out.mkdir()
    if name != "manifest.json":
        (out / "manifest.json").write_text(json.dumps({"outputs": {}}))
    (out / name).symlink_to(hidden / ("refs.npz" if name.endswith(".npz") else "refs.json"))
    run = _read_run(out, None, "log")
    assert run["ok"] is False and "output refused" in run["trace"]
    assert SECRET not in repr(run) and "7.0" not in repr(run.get("output"))


def test_a_fifo_output_does_not_hang_and_a_regular_one_reads(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "manifest.json")
    assert _read_run(out, None, "log")["ok"] is False
    os.unlink(out / "manifest.json")
    (out / "manifest.json").write_text(json.dumps({"outputs": {"a": {"kind": "array"}}}))
    np.savez(out / "arrays.npz", a=np.arange(3.0))
    run = _read_run(out, None, "log")
    assert run["ok"] and list(run["output"].arrays["a"]) == [0.0, 1.0, 2.0]
