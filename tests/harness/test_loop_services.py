"""A scripted twin run on flask-to-starlette: a counterexample found in round 1 is re-run in round 2.

The replies are scripted (labelled 'scripted'): round 1's Migrator writes the oracle with a
seeded defect, the Verifier states a request space and runs the search; round 2 repairs it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evidence_store.store import EvidenceStore
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the loop's tests run the real bwrap sandbox")

TASK = Path(__file__).resolve().parents[2] / "tasks" / "flask-to-starlette"
ORACLE = TASK / "solution" / "app"
GOOD = 'limit = int_arg(args, "limit", 10)'
BAD = 'limit = int_arg(args, "limit", 20)'
PROBE = """SERVICES = {
    "kind": "http",
    "spaces": {
        "catalog": {
            "methods": ["GET"],
            "paths": ["/books", "/books/{int}"],
            "query": {"limit": {"values": ["1", "3", "50"]}, "q": {"values": ["the", ""]}},
        }
    },
}
"""


def _replies() -> list[dict]:
    files = {p.name: p.read_text() for p in sorted(ORACLE.iterdir()) if p.is_file()}
    assert GOOD in files["app.py"]
    files["app.py"] = files["app.py"].replace(GOOD, BAD)
    return [
        plans.diagnose(),
        *[plans.call("write_file", path=f"/app/{name}", content=text) for name, text in files.items()],
        plans.call("submit", summary="ported the Bookshop"),
        plans.call("write_probe", name="bookshop", source=PROBE),
        plans.call("submit", summary="searched the catalog"),
        plans.diagnose(),
        plans.call("edit_file", path="/app/app.py", old=BAD, new=GOOD),
        plans.call("submit", summary="default limit back to 10"),
        plans.call("submit", summary="re-ran everything"),
    ]


@pytest.mark.heavy  # two rounds of counterexample search against a live app
def test_a_counterexample_from_round_one_is_stored_and_rerun_in_round_two(tmp_path):
    model = plans.write_script(tmp_path / "script.json", _replies())
    config = RunConfig.build(task=TASK, model=model, rounds=2, grade=False)
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    store = EvidenceStore(run.evidence, create=False)
    try:
        search = [r for r in store.records(property_id="search:http:catalog") if r.round == 1]
        assert search and search[-1].outcome.value == "violated"
        found = search[-1].observations
        assert found["reproduced"] == 3 and len(found["reproductions"]) == 3 and all(found["reproductions"])
        assert found["input"]["target"].startswith("/books") and found["size"] > 0
        regression = store.records(property_id=found["regression"])
        by_round = {(r.round, r.context.get("origin")): r.outcome.value for r in regression}
        assert by_round[(1, "bookshop.py")] == "violated"
        # round 2: the saved input is replayed on the repaired candidate before the Verifier starts
        assert by_round[(2, "regression")] == "established"
        assert regression[-1].context["input"] == found["input"]
    finally:
        store.close()
