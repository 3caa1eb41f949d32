"""`twin task new`: a published-layout task with a self-contained grader, from a bundled source and probe files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmark_adapter.grading.authoring import interface_note, new_task, stale_grader_files, twin_metadata
from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.grader import oracle_candidate, oracle_copy, run_grader
from benchmark_adapter.grading.sweep import load_defects, run_sweep
from harness.cli.app import main
from task_model.loader import load_task
from task_model.model import TaskError

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the generated grader needs bwrap")

REPO = Path(__file__).resolve().parents[2]
MLP = REPO / "tasks" / "t2j-mini" / "mlp-train"
MLP_PROBES = REPO / "tasks" / "t2j-mini" / "mlp-train" / "tests" / "probes"
DEFECTS = load_defects(REPO / "tests" / "benchmark_adapter" / "defects" / "mlp_train.py")
TINY = REPO / "tasks" / "published" / "tiny-net"
# defects the model probes (mlp-train's tests/probes/model.py) can see: converter, blocks, loss
MODEL_DEFECTS = ["converter-norm-swap", "gelu-tanh-approximation"]
TWIN_PACKAGES = ("ground", "task_model", "harness", "probes", "benchmark_adapter", "evidence_store", "roles", "prompts")


def published_instruction(tmp: Path) -> Path:
    """mlp-train's instruction with the published layout's paths (the original and assets under /app)."""
    text = (MLP / "instruction.md").read_text()
    for old, new in (
        ("`/source`", "`/app/torch_orig`"),
        ("`/assets`", "`/app/checkpoint`"),
        ("`/app/mlp_train/`", "`/app/jax_repo/mlp_train/`"),
        ("in `/app`", "in `/app/jax_repo`"),
    ):
        text = text.replace(old, new)
    path = tmp / "instruction.md"
    path.write_text(text)
    return path


def make_mlp_task(dest: Path, probes: list[Path], **kw):
    return new_task(
        dest,
        source=MLP / "environment" / "source",
        assets=MLP / "environment" / "assets",
        instruction=published_instruction(dest.parent),
        probes=probes,
        oracle=MLP / "solution" / "app",
        **kw,
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A task made from mlp-train's source with its model probe file (references recorded once)."""
    dest = tmp_path_factory.mktemp("made") / "mlp-from-source"
    report = make_mlp_task(dest, [MLP_PROBES / "model.py"])
    return report, load_task(dest)


@pytest.mark.heavy  # makes, publishes and grades a task
def test_made_task_is_published_self_contained_and_its_oracle_scores(made):
    report, task = made
    assert report.oracle_reward is not None and report.oracle_reward >= 0.97
    assert task.root.stat().st_mode & 0o777 == 0o755  # a task directory like any other
    assert task.environment is not None and task.settings.candidate_mount == "/app/jax_repo"
    assert (task.settings.source_mount, task.settings.assets_mount) == ("/app/torch_orig", "/app/checkpoint")
    assert oracle_candidate(task) == task.root / "solution" / "jax_repo"
    assert set(report.probes) >= {"checkpoint.load", "forward.logits", "loss.cross_entropy"}
    assert task.settings.probe_files == ["tests/probes/model.py"]  # twin probe runs them
    spec = json.loads((task.tests_dir / "spec.json").read_text())
    assert {p["noise"] for p in spec["probes"] if p["mode"] == "candidate"} == {"float64"}
    for path in task.tests_dir.rglob("*.py"):
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), re.M)
        assert not [i for i in imports if i.split(".")[0] in TWIN_PACKAGES], path


@pytest.mark.heavy  # a sweep: the oracle and two defects graded
def test_model_defects_score_below_the_oracle(made, tmp_path):
    _, task = made
    chosen = [d for d in DEFECTS if d.name in MODEL_DEFECTS]
    report = run_sweep(task, chosen, jobs=2)
    assert report.oracle_reward >= 0.97
    assert [d.name for d in report.defects if not d.caught] == []


@pytest.mark.heavy
def test_torch_importing_candidates_score_zero(made, tmp_path):
    _, task = made
    with oracle_copy(task) as oracle:
        (converter,) = [d for d in DEFECTS if d.name == "converter-imports-torch"]
        static = apply_defect(oracle, converter, tmp_path / "static")
        hidden = tmp_path / "hidden"
        shutil.copytree(oracle, hidden)
        init = hidden / "mlp_train" / "__init__.py"  # a name the static scan cannot read
        init.write_text("import importlib\nimportlib.import_module('tor' + 'ch')\n" + init.read_text())
        for candidate in (static, hidden):
            grade = run_grader(task, candidate)
            assert grade.reward == 0.0 and grade.components["independence"] == 0.0, candidate.name
        assert grade.checks["L0.independence.runtime"]["score"] == 0.0


CHEAT = """
import glob
FOUND = []
for pattern in PATTERNS:
    try:
        FOUND += glob.glob(pattern, recursive=True)
    except OSError:
        pass
for path in ("/logs/verifier/reward.json", "/tests/spec.json"):
    try:
        with open(path, "w") as f:
            f.write('{"reward": 1.0}')
        FOUND.append("wrote " + path)
    except OSError:
        pass
"""
ATTACKS = [
    "/tests/refs/*/ref/manifest.json",
    "/tests/spec.json",
    "/proc/1/root/tests/refs/*/ref/*",
    "/proc/self/root/tests/refs/*/ref/*",
    "/*/refs/*/ref/*",
    "/*/*/refs/*/ref/*",
    "/app/**/arrays.npz",
    "/scratch/**/manifest.json",
    "/tmp/**/manifest.json",
    "/logs/verifier",
]


@pytest.mark.heavy
@pytest.mark.parametrize("patterns, found", [(ATTACKS, False), (["/scratch/probe_driver.py"], True)])
def test_candidate_cannot_read_references_or_write_the_reward(tmp_path, patterns, found):
    """Red team on a made task (tiny-net): the candidate's predictions are right only if it found something.

    The second case is the control: a file the sandbox does show (the probe driver) is found,
    so the channel from what the candidate finds to its score works.
    """
    task = load_task(TINY)
    with oracle_copy(task) as oracle:
        cheat = tmp_path / "cheat"
        shutil.copytree(oracle, cheat)
    model = cheat / "tiny_net" / "model.py"
    text = model.read_text().replace(
        '    return _linear(params, "out"', '    return (1.0 if FOUND else 2.0) * _linear(params, "out"'
    )
    model.write_text(text + f"PATTERNS = {patterns!r}\n" + CHEAT)
    grade = run_grader(task, cheat, out_dir=tmp_path / "kept")
    assert grade.checks["forward.predictions"]["score"] == (1.0 if found else 0.0)
    reward = json.loads((tmp_path / "kept" / "verifier" / "reward.json").read_text())
    assert reward["reward"] == grade.reward and "checks" in reward  # the grader's own, written last


def test_grader_fails_closed_without_its_nested_sandbox(tmp_path):
    task = load_task(TINY)
    logs = tmp_path / "logs"
    env = {
        "PATH": str(tmp_path),
        "TESTS_DIR": str(task.tests_dir),
        "LOGS_DIR": str(logs),
        "APP_DIR": str(oracle_candidate(task)),
        "ASSETS_DIR": str(task.assets_dir),
    }
    proc = subprocess.run(
        [sys.executable, str(task.tests_dir / "grade.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    reward = json.loads((logs / "reward.json").read_text())  # the grader's machinery failed: retried, not scored
    assert "nested sandbox" in reward["infrastructure_error"] and "checks" in reward and not reward["checks"]


def test_outputs_are_never_read_through_links_or_fifos(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"x": 1}')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.symlink(secret, scratch / "outputs.json")
    os.mkfifo(scratch / "outputs.npz")
    script = (
        "import sys, types; sys.path.insert(0, sys.argv[1]); import grade, grading_run; run = types.SimpleNamespace(); "
        "grading_run._read_outputs(__import__('pathlib').Path(sys.argv[2]), run); print(run.values, run.arrays)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(TINY / "tests"), str(scratch)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "{} {}"


def test_bundled_task_has_the_current_grader_files():
    stale = stale_grader_files(TINY / "tests")
    assert stale == [], f"refresh with: twin task new {TINY.relative_to(REPO)} --refresh ({stale})"


def json_files(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*.json")}


@pytest.mark.heavy  # records the references of a task (15-20 s)
def test_refresh_keeps_the_references_when_recording_fails(tmp_path):
    task_dir = tmp_path / "tiny-net"
    shutil.copytree(TINY, task_dir)
    refs = task_dir / "tests" / "refs"
    before = json_files(refs)
    model = task_dir / "environment" / "torch_orig" / "tiny_net" / "model.py"
    model.write_text(model.read_text().replace("def load_model", "def renamed_load_model"))
    grade = task_dir / "tests" / "grade.py"
    grade.write_text(grade.read_text() + "# the task author's own line\n")  # a grader file refresh rewrites
    kept = grade.read_bytes()
    assert main(["task", "new", str(task_dir), "--refresh"]) == 2
    assert json_files(refs) == before
    assert grade.read_bytes() == kept  # a failed refresh leaves the grader as it was
    assert main(["task", "new", str(MLP), "--refresh"]) == 2  # not a task made by twin task new


@pytest.mark.slow
def test_refresh_re_records_references_of_the_same_structure(tmp_path):
    import numpy as np

    task_dir = tmp_path / "tiny-net"
    shutil.copytree(TINY, task_dir)
    refs = task_dir / "tests" / "refs"

    def shapes() -> dict:
        out = {}
        for path in sorted(refs.rglob("*.npz")):
            with np.load(path) as data:
                out[path.relative_to(refs)] = {k: data[k].shape for k in data.files}
        return out

    before = shapes()
    shutil.rmtree(refs)  # a task whose references were never recorded is recorded afresh
    assert main(["task", "new", str(task_dir), "--refresh"]) == 0  # and its oracle graded again
    assert shapes() == before


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    source = MLP / "environment" / "source"
    probe = ["--probe", str(MLP_PROBES / "model.py")]
    not_a_probe = tmp_path / "x.py"
    not_a_probe.write_text("def helper():\n    pass\n")
    cases = [
        (["--source", str(source), *probe], "exactly one of --instruction"),
        (["--source", str(source), "--interface", "f"], "at least one --probe"),
        (["--source", str(source), "--interface", "f", "--probe", str(not_a_probe)], "defines no probe"),
        (["--source", str(REPO / "evidence_store"), "--interface", "f", *probe], "not a PyTorch repository"),
        (["--source", str(source), "--interface", "f", *probe, "--output", "/app/torch_orig"], "--output must be"),
        (["--source", str(source), "--instruction", str(MLP / "instruction.md"), *probe], "does not load"),
    ]
    for args, message in cases:
        assert main(["task", "new", str(tmp_path / "t"), *args]) == 2, message
        err = " ".join(capsys.readouterr().err.split())
        assert message in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.py"]
    with pytest.raises(TaskError, match="exists"):
        new_task(tmp_path, source=source, probes=[MLP_PROBES / "model.py"], interface=["f"])


@pytest.mark.slow
def test_full_defect_sweep_on_a_task_made_with_every_mlp_probe_file(tmp_path):
    dest = tmp_path / "mlp-all"
    report = make_mlp_task(dest, sorted(MLP_PROBES.glob("*.py")))
    assert report.oracle_reward >= 0.97
    sweep = run_sweep(load_task(dest), DEFECTS, jobs=2)
    caught = [d.name for d in sweep.defects if d.caught]
    assert len(caught) >= 0.75 * len(DEFECTS), [d.name for d in sweep.defects if not d.caught]


def test_task_toml_lists_the_probe_files_and_the_interface_to_complete():
    text = twin_metadata(["model.py", "loss.py"], ["mlp_train.model:forward", "MLPClassifier"])
    twin = tomllib.loads(text)["metadata"]["twin"]
    assert twin == {"probe_files": ["tests/probes/model.py", "tests/probes/loss.py"]}  # nothing half-specified
    assert '# function = "mlp_train.model:forward"' in text and "MLPClassifier" not in text
    assert "complete the commented [metadata.twin.interface]" in interface_note(["mlp_train.model:forward"])
    assert "instruction only" in interface_note(["MLPClassifier"])
    assert interface_note([]) is None


def test_the_grader_library_names_none_of_twins_packages(tmp_path, monkeypatch):
    """A grader runs where twin is not installed: every vendored file is self-contained after its rewrites."""
    from benchmark_adapter.grading import authoring

    library = authoring.grader_library(tmp_path)
    for path, text in library.items():
        if path.suffix == ".py":
            assert authoring._twin_imports(text) == [], path.name
    planted = tmp_path / "planted.py"
    planted.write_text("from evidence_store.views import tally\n")
    monkeypatch.setitem(authoring.GRADER_FILES, "planted.py", planted)
    with pytest.raises(TaskError, match="planted.py imports evidence_store.views"):
        authoring.grader_library(tmp_path)


@pytest.mark.parametrize(("seconds", "warned"), [(500.0, True), (300.0, False)])
def test_task_new_warns_when_its_oracles_grade_takes_over_half_the_verifiers_timeout(monkeypatch, seconds, warned):
    from contextlib import nullcontext
    from types import SimpleNamespace

    from benchmark_adapter.grading import authoring
    from benchmark_adapter.grading.grader import Grade

    grade = Grade(task="t", candidate="c", reward=1.0, returncode=0, duration_s=seconds, sandbox="none")
    monkeypatch.setattr(authoring, "oracle_copy", lambda task: nullcontext(Path("/nowhere")))
    monkeypatch.setattr(authoring, "run_grader", lambda *a, **k: grade)
    reward, warnings = authoring._grade_oracle(SimpleNamespace(verifier_timeout_s=900.0), "none")
    assert reward == 1.0
    assert warnings == (["warning: the oracle's grade took 500 s, 56% of the verifier's timeout (900 s, "
                         "[verifier] timeout_sec in task.toml): a slower machine or candidate would be cut off "
                         "and score 0; raise the timeout or make the probes cheaper"] if warned else [])  # fmt: skip
