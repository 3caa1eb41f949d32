from __future__ import annotations

import pytest
from probe_fixtures import CANDIDATES, FIXTURES, TINY

from evidence_store.records import Outcome
from probes.audit import audit_candidate
from probes.checks import audit_check, file_checks, imports_check
from probes.context import make_context
from task_model.loader import load_task

SOURCE = TINY / "environment" / "source"


def _ctx(candidate, tmp_path):
    return make_context(load_task(TINY), candidate, sandbox_kind="none", workdir=tmp_path / "work")


def test_imports_and_independence_on_a_clean_candidate(tmp_path):
    imports, independence = imports_check()(_ctx(CANDIDATES / "good", tmp_path))
    assert imports.property.id == "imports" and imports.outcome is Outcome.ESTABLISHED
    assert imports.observations["modules"] == 1
    assert independence.outcome is Outcome.ESTABLISHED
    assert imports.context["rerun"]["factory"] == "probes.checks:imports_check"


def test_torch_import_breaks_imports_and_independence(tmp_path):
    imports, independence = imports_check()(_ctx(CANDIDATES / "torchy", tmp_path))
    assert imports.outcome is Outcome.VIOLATED
    assert "torch" in imports.observations["failed"]["model"]
    assert independence.outcome is Outcome.VIOLATED
    kinds = {f["kind"] for f in independence.observations["findings"]}
    assert kinds == {"forbidden_import", "runtime_import"}


def test_guarded_optional_torch_import_is_still_dependence(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    (cand / "extra.py").write_text(
        "import importlib\ntry:\n    importlib.import_module('torch')\nexcept ImportError:\n    pass\n"
    )
    imports, independence = imports_check()(_ctx(cand, tmp_path))
    assert imports.outcome is Outcome.ESTABLISHED
    assert independence.outcome is Outcome.VIOLATED
    assert any(f["file"] == "extra.py" for f in independence.observations["findings"])


def test_audit_flags_a_wrapper_around_the_original(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    (cand / "run.py").write_text(
        "import subprocess\nimport sys\n\n"
        "def forward(x):\n"
        "    return subprocess.run([sys.executable, '/source/model.py'], check=True)\n"
    )
    (cand / "shim.py").write_text(
        "import sys\nsys.path.insert(0, '/source')\nfrom train import train\n"
    )
    (cand / "run.sh").write_text("#!/bin/sh\npython /source/train.py\n")
    results = {r.property.id: r for r in audit_check()(_ctx(cand, tmp_path))}
    wrapping = results["audit.wrapping"]
    assert wrapping.outcome is Outcome.VIOLATED
    where = {(f["file"], f["line"]) for f in wrapping.observations["findings"]}
    assert (
        ("run.py", 5) in where
        and ("shim.py", 2) in where
        and ("shim.py", 3) in where
        and ("run.sh", 2) in where
    )
    assert results["audit.vendored"].outcome is Outcome.ESTABLISHED
    assert results["audit.transliteration"].outcome is Outcome.ESTABLISHED


def test_audit_flags_vendored_and_transliterated_copies(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    (cand / "vendor").mkdir()
    (cand / "vendor" / "model.py").write_text((SOURCE / "model.py").read_text())
    renamed = (SOURCE / "train.py").read_text().replace("import torch", "import jax.numpy as jnp")
    renamed = renamed.replace("torch.", "jnp.")
    (cand / "train.py").write_text(renamed)
    findings = audit_candidate(cand, SOURCE, forbidden=["torch"])
    kinds = {(f.kind, f.file) for f in findings}
    assert ("vendored", "vendor/model.py") in kinds
    assert ("forbidden_import", "vendor/model.py") in kinds
    assert ("transliteration", "train.py") in kinds


def test_audit_is_clean_on_a_native_candidate():
    assert audit_candidate(CANDIDATES / "good", SOURCE, forbidden=["torch"]) == []


@pytest.mark.parametrize("task", ["mlp-train", "llama-lora-sft", "llama-paged-serve"])
def test_audit_is_clean_on_bundled_oracles(repo_root, task):
    root = repo_root / "tasks" / "t2j-mini" / task
    if not (root / "solution" / "app").is_dir():
        pytest.skip(f"{task} has no oracle yet")
    assert (
        audit_candidate(
            root / "solution" / "app", root / "environment" / "source", forbidden=["torch"]
        )
        == []
    )


def test_candidate_checks_outcomes(tmp_path):
    results = {
        r.property.id: r
        for r in file_checks(str(FIXTURES / "probe_numpy.py"))(_ctx(CANDIDATES / "good", tmp_path))
    }
    assert results["probe_numpy.ok"].outcome is Outcome.ESTABLISHED
    bad = results["probe_numpy.bad"]
    assert (
        bad.outcome is Outcome.VIOLATED
        and bad.score == 0.5
        and "always_false" in bad.observations["message"]
    )
    misfit = results["np.misfit"]
    assert misfit.outcome is Outcome.NOT_ESTABLISHED and "init_params" in misfit.trace
    assert results["probe_numpy.nothing"].outcome is Outcome.NOT_ESTABLISHED


def test_candidate_check_crash_in_candidate_code_is_violated(tmp_path):
    (result,) = file_checks(str(FIXTURES / "probe_numpy.py"), ["ok"])(
        _ctx(CANDIDATES / "crashy", tmp_path)
    )
    assert result.outcome is Outcome.VIOLATED
    assert "model.py" in result.trace
