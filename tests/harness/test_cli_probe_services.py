"""`twin probe` on flask-to-starlette runs HTTP probes and a counterexample search by itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tasks" / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"
DEFECTS = REPO / "tests" / "benchmark_adapter" / "defects" / "flask_to_starlette.py"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="both services run in bwrap sandboxes")


def _probe(candidate: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "probe", "--task", str(TASK), "--candidate", str(candidate), *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_bad_search_budget_is_one_line_and_exit_2():
    done = _probe(ORACLE, "--search-examples", "0")
    assert done.returncode == 2 and "--search-examples must be at least 1" in done.stderr


@pytest.mark.heavy  # services started on both sides, then reproduced
def test_a_seeded_defect_comes_out_violated_with_a_reproduced_counterexample(tmp_path):
    defect = next(d for d in load_defects(DEFECTS) if d.name == "limit-default")
    candidate = apply_defect(ORACLE, defect, tmp_path / "cand")
    done = _probe(candidate, "--json", "--no-builtin", "--search-examples", "20", "--search-seconds", "10")
    assert done.returncode == 1, done.stderr  # a property violated
    report = json.loads(done.stdout)
    assert report["probe_families"] == {"http": "declared in [metadata.twin] probes"}
    results = {r["property"]["id"]: r for r in report["results"]}
    search = results["search:http:catalog"]
    assert search["outcome"] == "violated"
    assert search["observations"]["reproduced"] == 3 and search["observations"]["input"]["target"].startswith("/books")
    assert results[search["observations"]["regression"]]["outcome"] == "violated"
    assert {"http:books_query_json", "search:http:errors"} <= set(results)


@pytest.mark.slow
def test_the_oracle_has_nothing_violated():
    done = _probe(ORACLE, "--json", "--search-examples", "60", "--search-seconds", "15")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert len(results) >= 15 and all(r["outcome"] == "established" for r in results)


@pytest.mark.heavy  # two route searches of thirty seconds each
def test_without_stated_requests_the_originals_routes_are_searched(tmp_path):
    task = tmp_path / "shop"
    shutil.copytree(TASK, task)
    toml = task / "task.toml"
    text = toml.read_text().replace('name = "flask-to-starlette"', 'name = "shop"')
    toml.write_text(text.replace('probe_files = ["tests/probes/http.py"]\n', ""))  # no file states a request
    oracle = task / "solution" / "app"
    defect = next(d for d in load_defects(DEFECTS) if d.name == "limit-default")
    budget = ("--json", "--no-builtin", "--search-examples", "100", "--search-seconds", "30")
    outcomes = {}
    for name, candidate in (("oracle", oracle), ("defect", apply_defect(oracle, defect, tmp_path / "cand"))):
        done = subprocess.run(
            [sys.executable, "-m", "harness.cli", "probe", "--task", str(task), "--candidate", str(candidate), *budget],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert done.returncode == (1 if name == "defect" else 0), done.stderr
        outcomes[name] = {r["property"]["id"]: r["outcome"] for r in json.loads(done.stdout)["results"]}
    assert outcomes["oracle"] == {"search:http:routes": "established"}
    assert outcomes["defect"]["search:http:routes"] == "violated"
