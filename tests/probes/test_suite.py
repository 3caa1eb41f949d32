from __future__ import annotations

import ast
import shutil

import pytest
from probe_fixtures import CANDIDATES, FIXTURES, TINY

from evidence_store.records import Outcome, ProbeResult, Property
from probes import checks, differential
from probes.base import load_factory
from probes.context import make_context
from probes.probe_format import ProbeFileError
from probes.suite import PROBE_FILE_FORMAT, builtin_checks, load_probe_file, run_probes, run_suite, task_probes
from task_model.loader import load_task


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
    with run_suite(load_task(TINY), CANDIDATES / "good", probes, sandbox_kind="none", workdir=tmp_path / "work") as suite:
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


def test_builtin_checks_and_task_library(repo_root):
    from task_model.loader import load_task

    task = load_task(TINY)
    assert [p.__name__ for p in builtin_checks(task)] == ["imports", "audit"]
    assert task_probes(task) == []
    mlp = repo_root / "tasks" / "t2j-mini" / "mlp-train"
    if mlp.is_dir():
        names = [p.__name__ for p in task_probes(load_task(mlp))]
        assert "model" in names and "training" in names and "candidate:checks" in names


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
