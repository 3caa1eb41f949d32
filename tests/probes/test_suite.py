from __future__ import annotations

import ast
import shutil
import tomllib

import pytest
from probe_fixtures import CANDIDATES, FIXTURES, TINY

from evidence_store.records import Outcome, ProbeResult, Property
from probes import checks, differential
from probes.base import load_factory
from probes.context import make_context
from probes.probe_format import ProbeFileError, probe_names
from probes.suite import (
    PROBE_FILE_FORMAT,
    builtin_checks,
    load_probe_file,
    run_probes,
    run_suite,
    task_probe_files,
    task_probes,
)
from task_model.distribution import is_materialized
from task_model.loader import load_task
from task_model.original import OriginalDistribution


def test_load_probe_file_groups_pairs_and_checks():
    probes = load_probe_file(FIXTURES / "probe_numpy.py")
    assert [p.__name__ for p in probes] == ["probe_numpy", "probe_numpy:checks"]


def test_a_probe_file_is_read_and_parsed_once_from_loading_to_running(tmp_path, monkeypatch):
    path = tmp_path / "probe_numpy.py"
    shutil.copy(FIXTURES / "probe_numpy.py", path)
    parsed, ran = [], []
    real_parse = ast.parse

    def counting_parse(source, filename="<unknown>", *args, **kwargs):
        parsed.append(str(filename))
        return real_parse(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    monkeypatch.setattr(differential, "run_matched_probes", lambda ctx, file, probes, rerun: ran.append(file) or [])
    monkeypatch.setattr(checks, "run_candidate_checks", lambda ctx, file, found: ran.append(file) or [])
    probes = load_probe_file(path)
    path.unlink()  # the sides are given the text that was read, not the file as it is later
    task = load_task(TINY)
    with run_suite(task, CANDIDATES / "good", probes, sandbox_kind="none", workdir=tmp_path / "work") as suite:
        assert suite.results == []
    assert parsed.count(str(path)) == 1
    assert [file.path for file in ran] == [path, path]
    assert {file.data for file in ran} == {(FIXTURES / "probe_numpy.py").read_bytes()}


def test_load_probe_file_refuses_missing_and_malformed(tmp_path):
    with pytest.raises(ProbeFileError, match="not found"):
        load_probe_file(tmp_path / "nope.py")
    bad = tmp_path / "bad.py"
    bad.write_text("def reference(env):\n    return {}\n")
    with pytest.raises(ProbeFileError, match="no matching candidate"):
        load_probe_file(bad)


def test_a_probe_that_raises_becomes_not_established(tmp_path):
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)

    def broken(_ctx):
        raise RuntimeError("probe bug")

    def fine(_ctx):
        return [ProbeResult(property=Property(id="fine", kind="x"), outcome=Outcome.ESTABLISHED)]

    seen = []
    results = run_probes(
        ctx, [broken, fine], jobs=2, progress=lambda done, total, r: seen.append((done, total))
    )
    assert [r.property.id for r in results] == ["probe:broken", "fine"]
    assert results[0].outcome is Outcome.NOT_ESTABLISHED
    assert "probe bug" in results[0].trace
    assert "probe_wall_s" in results[1].observations["timing"]
    assert seen == [(1, 2), (2, 2)]


def test_builtin_checks_and_a_bundled_task_s_own_probe_files(repo_root):
    task = load_task(TINY)
    assert [p.__name__ for p in builtin_checks(task)] == ["imports", "audit"]
    assert task_probes(task) == []
    mlp = load_task(repo_root / "tasks" / "t2j-mini" / "mlp-train")
    own = mlp.root / "tests" / "probes"
    assert task_probe_files(mlp) == [own / "candidate.py", own / "model.py", own / "training.py"]
    names = [p.__name__ for p in task_probes(mlp)]
    assert names == ["candidate:checks", "model", "training"]


BUNDLED_NAMES = [
    "mlp-train", "llama-lora-sft", "llama-paged-serve", "flask-to-starlette", "litgpt-lora", "litgpt-generate",
    "tiny-net",
]  # fmt: skip


def _tiny_named(tmp_path, name: str, probe_files: list[str]):
    """A copy of the tiny task named `name`, listing `probe_files` (copied from the fixtures into tests/probes/)."""
    task = tmp_path / "task"
    shutil.copytree(TINY, task)
    (task / "tests" / "probes").mkdir(parents=True)
    for file in probe_files:
        shutil.copy(FIXTURES / file, task / "tests" / "probes" / file)
    toml = (task / "task.toml").read_text().replace('name = "tiny"', f'name = "{name}"')
    listed = ", ".join(f'"tests/probes/{file}"' for file in probe_files)
    (task / "task.toml").write_text(toml + f"probe_files = [{listed}]\n")
    return load_task(task)


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_a_user_task_named_like_a_bundled_one_gets_only_its_own_probes(tmp_path, name):
    task = _tiny_named(tmp_path, name, ["probe_numpy.py"])
    assert task.name == name
    assert task_probe_files(task) == [task.root / "tests" / "probes" / "probe_numpy.py"]
    assert [p.__name__ for p in task_probes(task)] == ["probe_numpy", "probe_numpy:checks"]
    assert task_probes(_tiny_named(tmp_path / "none", name, [])) == []


def test_a_listed_probe_file_that_is_missing_is_one_error_naming_it(tmp_path):
    task = _tiny_named(tmp_path, "tiny", ["probe_numpy.py"])
    (task.root / "tests" / "probes" / "probe_numpy.py").unlink()
    missing = r"task tiny: probe file .*probe_numpy.py \(probe_files in task.toml\) not found"
    with pytest.raises(ProbeFileError, match=missing):
        task_probes(task)


def _properties(task) -> list[tuple[str, str]]:
    """(file name, property id) of every probe and check the task's own probe files define, read without running."""
    return [
        (path.name, meta.get("id") or name)
        for path in task_probe_files(task)
        for checks in (False, True)
        for name, meta in probe_names(path, checks=checks).items()
    ]


@pytest.mark.parametrize("where", ["t2j-mini/mlp-train", "litgpt-lora"])
def test_a_bundled_task_copied_anywhere_keeps_its_probes(repo_root, tmp_path, where):
    source = repo_root / "tasks" / where
    original = source / "task.toml"
    declared = tomllib.loads(original.read_text())["metadata"]["twin"].get("original")
    if declared is not None and not is_materialized(OriginalDistribution(**declared)):
        pytest.skip(f"{where}'s original is not in twin's cache")
    copy = tmp_path / "shared" / "elsewhere"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    here, there = load_task(source), load_task(copy)
    assert all(path.is_relative_to(copy) for path in task_probe_files(there))
    assert _properties(there) == _properties(here) and len(_properties(here)) >= 10
    assert [p.__name__ for p in task_probes(there)] == [p.__name__ for p in task_probes(here)]


def test_probe_file_format_is_documented():
    for needed in (
        "inputs_NAME",
        "reference_NAME",
        "candidate_NAME",
        "check_NAME",
        "env.dtype",
        "component",
    ):
        assert needed in PROBE_FILE_FORMAT


@pytest.mark.parametrize(
    "spec",
    [
        "probes.differential:differential_probe",
        "probes.checks:imports_check",
        "probes.checks:audit_check",
        "probes.checks:candidate_check",
        "probes.localize:localization_probe",
    ],
)
def test_rerun_factories_import(spec):
    assert callable(load_factory(spec))


def test_bad_factory_spec():
    with pytest.raises(ValueError):
        load_factory("probes.checks")
    with pytest.raises(ValueError):
        load_factory("probes.checks:nothing_here")
