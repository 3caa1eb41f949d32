"""The static audit and the candidate checks against trees built to fool or break them.

Each test is an attack: links out of the candidate, special files, a chain deeper
than any recursion limit. The worst a candidate gets is a violated property; it
never hides code from a check, never hangs it and never reads the task's files.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from probe_fixtures import TINY

from evidence_store.records import Outcome
from probes.audit import audit_candidate
from probes.checks import audit_check, imports_check
from probes.context import make_context
from task_model.loader import load_task
from tests.fakes.trees import deep_chain

SOURCE = TINY / "environment" / "source"
SECRET = "AUDIT-SECRET-9d1e"


def _ctx(candidate, tmp_path):
    return make_context(load_task(TINY), candidate, sandbox_kind="none", workdir=tmp_path / "work")


def _audit_in_time(candidate, seconds=20):
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(findings=audit_candidate(candidate, SOURCE, forbidden=["torch"])), daemon=True
    )
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the audit hung on a file the candidate made"
    return out["findings"]


def test_links_out_and_special_files_are_not_read(tmp_path, candidate_copy):
    hidden = tmp_path / "task-tests"
    hidden.mkdir()
    (hidden / "grader.py").write_text(f"import torch  # {SECRET}\n")
    (hidden / "notes.txt").write_text(f"/source/ {SECRET}\n")
    cand = candidate_copy("good")
    (cand / "stolen.py").symlink_to(hidden / "grader.py")
    (cand / "stolen.txt").symlink_to(hidden / "notes.txt")
    (cand / "zero.txt").symlink_to("/dev/zero")
    os.mkfifo(cand / "hang.py")
    os.mkfifo(cand / "hang.txt")
    findings = _audit_in_time(cand)
    assert SECRET not in repr(findings)
    assert not any(f.file.startswith("stolen") for f in findings), findings


def test_a_link_to_the_original_is_wrapping(candidate_copy):
    cand = candidate_copy("good")
    (cand / "model_ref.py").symlink_to("/source/model.py")
    findings = _audit_in_time(cand)
    assert any(f.kind == "loads_original" and f.file == "model_ref.py" for f in findings)


def test_a_module_over_the_size_cap_is_hidden_code_not_clean(candidate_copy):
    cand = candidate_copy("good")
    with open(cand / "huge.py", "wb") as fh:
        fh.truncate(50 << 20)
    findings = _audit_in_time(cand)
    assert {f.kind for f in findings if f.file == "huge.py"} >= {"forbidden_import", "loads_original"}


def test_a_deep_chain_turns_the_audit_violated_not_not_established(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    deep_chain(cand, 1000)  # its leaf imports torch, out of reach of a capped walk
    results = {r.property.id: r for r in audit_check(transliteration=False)(_ctx(cand, tmp_path))}
    assert results and all(r.outcome is Outcome.VIOLATED for r in results.values()), results
    assert "hidden from the audit" in results["audit.wrapping"].observations["message"]


@pytest.mark.parametrize("depth", [1000])
def test_a_deep_chain_makes_imports_and_independence_violated(tmp_path, candidate_copy, depth):
    cand = candidate_copy("good")
    deep_chain(cand, depth)
    imports, independence = imports_check()(_ctx(cand, tmp_path))
    assert imports.outcome is Outcome.VIOLATED, imports
    assert "not every module was reached" in imports.observations["message"]
    assert independence.outcome is Outcome.VIOLATED, independence


def test_a_deeply_nested_module_neither_crashes_the_audit_nor_passes_it(candidate_copy):
    """libcst's native parser takes the whole process down on deep nesting: run it apart."""
    import subprocess
    import sys

    cand = candidate_copy("good")
    (cand / "brackets.py").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    (cand / "chain.py").write_text("y = " + "1+" * 50000 + "1\nimport torch\n")
    code = (
        "import sys; from pathlib import Path; from probes.audit import audit_candidate; "
        "f = audit_candidate(Path(sys.argv[1]), Path(sys.argv[2]), forbidden=['torch']); "
        "print(sorted({(x.kind, x.file) for x in f}))"
    )
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(cand), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "('forbidden_import', 'chain.py')" in proc.stdout and "('unparsable', 'brackets.py')" in proc.stdout
