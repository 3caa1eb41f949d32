"""A generated grader's spec entries carry the id and level `twin probe` gives the same property."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark_adapter.grading.references import _entry
from probes.probe_format import probe_names, property_of

TINY = Path(__file__).resolve().parents[2] / "tasks" / "published" / "tiny-net"
PROBE_FILE = TINY / "tests" / "probes" / "tiny_net.py"


@pytest.mark.parametrize("checks", [False, True])
def test_grader_and_probe_give_each_property_one_id_and_level(checks):
    for name, meta in probe_names(PROBE_FILE, checks=checks).items():
        mode, kind, default = ("check", "check", 0) if checks else ("candidate", "differential", 1)
        graded = _entry(PROBE_FILE, name, meta, mode, kind_prefix="check" if checks else "")
        pid, _, level = property_of(PROBE_FILE, name, meta, kind=kind, level=default)
        assert (graded["id"], graded["level"]) == (pid, level), name


def test_the_bundled_generated_task_s_spec_has_those_ids_and_levels():
    spec = json.loads((TINY / "tests" / "spec.json").read_text())
    assert {p["id"]: p["level"] for p in spec["probes"] if p["mode"] == "check"} == {"tiny_net.jit": 0}
    for entry in spec["probes"]:
        checks = entry["mode"] == "check"
        meta = probe_names(PROBE_FILE, checks=checks)[entry["name"]]
        kind, default = ("check", 0) if checks else ("differential", 1)
        assert entry["id"] == property_of(PROBE_FILE, entry["name"], meta, kind=kind, level=default)[0]
