"""A generated grader's spec entries carry the level `twin probe` gives the same property."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_adapter.grading.references import _entry
from probes.probe_format import probe_names, property_of

TINY = Path(__file__).resolve().parents[2] / "tasks" / "published" / "tiny-net"
PROBE_FILE = TINY / "tests" / "probes" / "tiny_net.py"


@pytest.mark.parametrize("checks", [False, True])
def test_grader_and_probe_give_each_property_one_level(checks):
    for name, meta in probe_names(PROBE_FILE, checks=checks).items():
        mode, kind, default = ("check", "check", 0) if checks else ("candidate", "differential", 1)
        graded = _entry(PROBE_FILE, name, meta, mode, kind_prefix="check" if checks else "")["level"]
        assert graded == property_of(PROBE_FILE, name, meta, kind=kind, level=default)[2], name


def test_the_bundled_generated_task_s_spec_has_those_levels():
    spec = json.loads((TINY / "tests" / "spec.json").read_text())
    assert {p["id"]: p["level"] for p in spec["probes"] if p["mode"] == "check"} == {"tiny_net.check_jit": 0}
