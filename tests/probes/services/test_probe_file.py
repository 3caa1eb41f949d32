from __future__ import annotations

from pathlib import Path

import pytest

from probes.probe_format import ProbeFileError, read_probe_file
from probes.services.probe_file import SearchBudget, read_services
from probes.suite import load_probe_file, task_probes
from task_model.loader import load_task

REPO = Path(__file__).resolve().parents[3]
SERVICES = """SERVICES = {
    "kind": "http",
    "cases": [{"name": "root", "input": {"method": "GET", "target": "/"}}],
    "spaces": {"any": {"methods": ["GET"], "paths": ["/"]}},
}
"""


def test_a_services_literal_is_read_without_running_the_file(tmp_path):
    path = tmp_path / "svc.py"
    path.write_text("raise SystemExit('never run')\n" + SERVICES)
    spec = read_services(read_probe_file(path))
    assert spec["kind"] == "http" and list(spec["spaces"]) == ["any"]
    assert [p.__name__ for p in load_probe_file(path)] == ["svc:services"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("SERVICES = {'kind': 'smtp', 'cases': []}", "must be one of"),
        ("SERVICES = {'kind': 'http'}", "neither cases nor spaces"),
        ("SERVICES = {'kind': 'http', 'cases': [{'input': {}}]}", "list of"),
        ("SERVICES = {'kind': 'http', 'spaces': {}, 'extra': 1}", "unknown key"),
        ("SERVICES = dict(kind='http')", "literal dict"),
    ],
)
def test_a_malformed_services_literal_is_one_clear_error(tmp_path, text, error):
    path = tmp_path / "bad.py"
    path.write_text(text + "\n")
    with pytest.raises(ProbeFileError, match=error):
        load_probe_file(path)


def test_a_broken_probe_pair_is_still_an_error_next_to_services(tmp_path):
    path = tmp_path / "mixed.py"
    path.write_text(SERVICES + "\ndef reference_x(env):\n    return {}\n")
    with pytest.raises(ProbeFileError, match="no matching candidate_x"):
        load_probe_file(path)


def test_the_bookshop_s_own_probe_file_states_cases_and_spaces_and_takes_the_budget():
    task = load_task(REPO / "tasks" / "flask-to-starlette")
    probes = task_probes(task, SearchBudget(max_examples=5, seconds=1.0))
    assert [p.__name__ for p in probes] == ["http:services"]
    spec = read_services(read_probe_file(task.root / "tests" / "probes" / "http.py"))
    assert set(spec["spaces"]) == {"listing", "catalog", "create", "login", "session", "prefs", "errors"}
    assert len(spec["cases"]) == 4


def test_a_python_api_space_in_a_probe_file_runs_without_declared_sides(tiny_context, tmp_path):
    from tests.probes.services.test_search import NO_STRIP, SPACE

    path = tmp_path / "versions.py"
    path.write_text(f"SERVICES = {{'kind': 'python_api', 'spaces': {{'versions': {SPACE!r}}}}}\n")
    (probe,) = load_probe_file(path, SearchBudget(max_examples=150, seconds=60))
    results = {r.property.id.split(":")[0]: r for r in probe(tiny_context(lib=NO_STRIP))}
    assert results["search"].outcome.value == "violated" and results["search"].observations["reproduced"] == 3
    assert results["regression"].outcome.value == "violated"
    assert "counterexample, shrunk to" in results["search"].observations["message"]
