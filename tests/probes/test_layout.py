from __future__ import annotations

import shutil

import pytest
from probe_fixtures import BARE_NAMES, CANDIDATES

from evidence_store.records import Outcome
from probes.audit import audit_candidate
from probes.checks import audit_check, imports_check
from probes.context import make_context
from probes.layout import candidate_modules, dotted_name, import_roots, infer_import_roots, module_name
from task_model.loader import load_task

PORT = BARE_NAMES / "solution" / "app"
SOURCE = BARE_NAMES / "environment" / "source"


def test_a_folder_whose_modules_import_siblings_is_an_import_root():
    assert infer_import_roots(PORT) == ["jax_repo"]
    assert candidate_modules(PORT, import_roots(PORT, None)) == {
        "model": "jax_repo/model.py",
        "train": "jax_repo/train.py",
    }


def test_packages_and_flat_candidates_have_no_extra_root(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("import a\n")  # a package is imported through its parent, never a root
    assert infer_import_roots(tmp_path) == []
    assert infer_import_roots(CANDIDATES / "good") == []
    assert candidate_modules(tmp_path, [""]) == {"pkg": "pkg/__init__.py", "pkg.a": "pkg/a.py", "pkg.b": "pkg/b.py"}


@pytest.mark.parametrize(
    ("declared", "expected"),
    [(None, ["jax_repo", ""]), (["jax_repo/"], ["jax_repo", ""]), ([], [""]), (["a", "a/b"], ["a/b", "a", ""])],
)
def test_declared_roots_win_over_the_layout(declared, expected):
    assert import_roots(PORT, declared) == expected


@pytest.mark.parametrize(
    ("rel", "expected"),
    [("pkg/model.py", "pkg.model"), ("pkg/__init__.py", "pkg"), ("__init__.py", ""), ("train.py", "train")],
)
def test_a_file_s_dotted_name_drops_its_suffix_and_a_package_s_init(rel, expected):
    assert dotted_name(rel) == expected


def test_module_names_follow_the_most_specific_root():
    assert module_name("jax_repo/model.py", ["jax_repo", ""]) == "model"
    assert module_name("jax_repo/model.py", [""]) == "jax_repo.model"
    assert module_name("pkg/__init__.py", ["jax_repo", ""]) == "pkg"


def _ctx(task, candidate, tmp_path):
    return make_context(load_task(task), candidate, sandbox_kind="none", workdir=tmp_path / "work")


def test_a_port_importing_siblings_by_bare_name_gets_no_false_violation(tmp_path):
    ctx = _ctx(BARE_NAMES, PORT, tmp_path)
    results = {r.property.id: r for r in imports_check()(ctx) + audit_check()(ctx)}
    assert {pid: r.outcome for pid, r in results.items()} == {
        "imports": Outcome.ESTABLISHED,
        "independence": Outcome.ESTABLISHED,
        "audit.wrapping": Outcome.ESTABLISHED,
        "audit.vendored": Outcome.ESTABLISHED,
        "audit.transliteration": Outcome.ESTABLISHED,
    }
    assert results["imports"].observations["modules"] == 2


def _task_declaring(tmp_path, roots: str):
    task = tmp_path / "task"
    shutil.copytree(BARE_NAMES, task, ignore=shutil.ignore_patterns("solution"))
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + f"candidate_import_roots = {roots}\n")
    return task


def test_declared_roots_are_how_the_imports_check_imports(tmp_path):
    # Declared as the candidate's own directory only, the bare-name import of a sibling
    # does fail: the check imports exactly as the task says, not as twin guesses.
    ctx = _ctx(_task_declaring(tmp_path, "[]"), PORT, tmp_path)
    imports, _ = imports_check()(ctx)
    assert imports.outcome is Outcome.VIOLATED
    assert "No module named 'model'" in imports.observations["failed"]["jax_repo.train"]
    ctx = _ctx(_task_declaring(tmp_path / "declared", '["jax_repo"]'), PORT, tmp_path / "declared")
    imports, _ = imports_check()(ctx)
    assert imports.outcome is Outcome.ESTABLISHED


def test_a_name_clash_is_not_a_dependency_but_a_module_only_the_original_has_is(tmp_path):
    port = tmp_path / "app"
    shutil.copytree(PORT, port)
    assert not [f for f in audit_candidate(port, SOURCE, forbidden=["torch"]) if f.kind == "loads_original"]
    (port / "jax_repo" / "train.py").unlink()
    (port / "jax_repo" / "run.py").write_text("import model\nfrom train import train\n")
    findings = [f for f in audit_candidate(port, SOURCE, forbidden=["torch"]) if f.kind == "loads_original"]
    assert [(f.file, f.line) for f in findings] == [("jax_repo/run.py", 2)]
    assert "train, a module only the original provides" in findings[0].detail
