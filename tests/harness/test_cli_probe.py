from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness.cli.probe
from ground.isolation import IsolationError
from ground.sandbox import SandboxError
from harness.cli.app import main

FIXTURES = Path(__file__).resolve().parents[1] / "probes" / "fixtures"
TINY = FIXTURES / "tiny"
GOOD = FIXTURES / "candidates" / "good"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "probe", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "/nonexistent", "--candidate", str(GOOD)], "task directory not found"),
        (["--task", str(TINY), "--candidate", "/nonexistent"], "candidate directory not found"),
        (
            ["--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "docker"],
            "--sandbox must be one of",
        ),
        (
            ["--task", str(TINY), "--candidate", str(GOOD), "--probe", "/nonexistent.py"],
            "probe file not found",
        ),
        (["--task", str(TINY), "--candidate", str(GOOD), "--no-builtin"], "nothing to run"),
        (
            ["--task", str(TINY), "--candidate", str(GOOD), "--jobs", "0"],
            "--jobs must be at least 1",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_malformed_probe_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def reference(env):\n    return {}\n")
    assert (
        main(
            [
                "probe",
                "--task",
                str(TINY),
                "--candidate",
                str(GOOD),
                "--probe",
                str(bad),
                "--sandbox",
                "none",
            ]
        )
        == 2
    )


@pytest.mark.heavy  # every probe of a task, twice
def test_json_output_runs_checks_probes_and_localization(tmp_path):
    wrong = FIXTURES / "candidates" / "wrong"
    proc = _cli(
        "--task",
        str(TINY),
        "--candidate",
        str(wrong),
        "--probe",
        str(FIXTURES / "probe_numpy.py"),
        "--sandbox",
        "none",
        "--json",
        "--workdir",
        str(tmp_path / "work"),
    )
    assert proc.returncode == 1, proc.stderr  # np.affine violated
    data = json.loads(proc.stdout)
    outcomes = {r["property"]["id"]: r["outcome"] for r in data["results"]}
    assert outcomes["imports"] == "established" and outcomes["independence"] == "established"
    assert outcomes["np.affine"] == "violated" and outcomes["np.misfit"] == "not_established"
    localization = next(r for r in data["results"] if r["property"]["id"] == "localization")
    assert localization["observations"]["component"] == "model.Affine"
    assert (tmp_path / "work" / "probes").is_dir()


def test_table_output(tmp_path):
    proc = _cli(
        "--task",
        str(TINY),
        "--candidate",
        str(GOOD),
        "--sandbox",
        "none",
        "--workdir",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "independence" in proc.stdout
        and "established" in proc.stdout
        and "audit.wrapping" in proc.stdout
    )


@pytest.mark.heavy  # every probe of a task
def test_piped_output_is_whole_lines_with_the_deciding_numbers(tmp_path):
    proc = _cli(
        "--task", str(TINY), "--candidate", str(FIXTURES / "candidates" / "wrong"),
        "--probe", str(FIXTURES / "probe_numpy.py"), "--sandbox", "none", "--workdir", str(tmp_path / "w"),
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert not any(c in proc.stdout for c in "┏┃│")  # no table when not on a terminal
    # its numpy reference never runs the torch module it names
    assert any(line.startswith("violated (against a re-implementation) np.affine (L") for line in lines)
    deciding = [line for line in lines if "distance" in line]
    assert deciding and all(
        __import__("re").fullmatch(
            r"    \S+: \w+ distance \S+ > tolerance \S+ \(noise \S+(, [\w-]+)?\)(, uninformative)?", line
        )
        for line in deciding
    ), deciding
    assert any(line == f"probe files and outputs: {tmp_path / 'w'}" for line in lines)


def test_a_model_tasks_families_are_listed_only_when_asked(tmp_path):
    proc = _cli("--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--workdir", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stderr
    assert "service probe families" not in proc.stdout and "nothing run" not in proc.stdout


def test_a_probe_compared_against_a_re_implementation_is_marked_and_one_that_runs_the_original_is_not(
    tmp_path, capsys
):
    plain = FIXTURES / "plain"
    args = ["probe", "--task", str(plain), "--candidate", str(plain / "solution" / "app"), "--no-builtin"]
    probe = ["--probe", str(FIXTURES / "probe_reimplemented.py"), "--sandbox", "none", "--workdir", str(tmp_path)]
    assert main([*args, *probe]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "established (against a re-implementation) calc.affine.copy (L1)" in lines
    at = lines.index("established (against a re-implementation) calc.affine.copy (L1)")
    assert lines[at + 1] == (
        "    the reference never ran calc.affine: the probe compared against its own re-implementation; "
        "on the task's interface: calc.affine"
    )
    assert "established     calc.affine (L1)" in lines  # runs the original's own function: not marked


def test_a_probe_that_calls_its_component_and_drops_the_result_is_marked_with_why(tmp_path, capsys):
    shop = FIXTURES / "shop"
    args = ["probe", "--task", str(shop), "--candidate", str(shop / "solution" / "app"), "--no-builtin"]
    probe = ["--probe", str(FIXTURES / "probe_counterfactual.py"), "--sandbox", "none", "--workdir", str(tmp_path)]
    assert main([*args, *probe]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("established (against a re-implementation) shop.affine.dropped (L1)")
    assert lines[at + 1] == (
        "    the reference's outputs stayed the same when shop.affine gave other values or did nothing: the probe "
        "compared against its own re-implementation; on the task's interface: shop.affine"
    )
    at = lines.index("established (against a re-implementation) shop.affine.unhooked (L1)")
    assert lines[at + 1].startswith("    the probe removed or replaced the hook that records what its reference ran")
    assert "established     shop.affine (L1)" in lines and "established     shop.summary (L1)" in lines


def test_a_family_nothing_was_run_for_says_so(tmp_path):
    proc = _cli(
        "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--workdir", str(tmp_path), "--families"
    )
    assert proc.returncode == 0, proc.stderr
    assert "; python (its modules define public functions" in proc.stdout
    assert "  python: nothing run: no request or request space stated for it" in proc.stdout


# ---- exit status, task probe files, --keep, --init ------------------------------------------
def _task_with_probe_files(tmp_path: Path, files: list[str]) -> Path:
    """A copy of the tiny task whose task.toml lists `files` (copied from the fixtures into tests/probes/)."""
    task = tmp_path / "tiny"
    shutil.copytree(TINY, task)
    (task / "tests" / "probes").mkdir()
    for name in files:
        shutil.copy(FIXTURES / name, task / "tests" / "probes" / name)
    listed = ", ".join(f'"tests/probes/{name}"' for name in files)
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml + f"probe_files = [{listed}]\n")
    return task


@pytest.mark.heavy  # every probe of a task
def test_a_task_s_probe_files_run_without_probe_and_a_violation_exits_1(tmp_path):
    task = _task_with_probe_files(tmp_path, ["probe_numpy.py"])
    wrong = str(FIXTURES / "candidates" / "wrong")
    proc = _cli("--task", str(task), "--candidate", wrong, "--sandbox", "none", "--json")
    assert proc.returncode == 1, proc.stderr
    outcomes = {r["property"]["id"]: r["outcome"] for r in json.loads(proc.stdout)["results"]}
    assert outcomes["np.affine"] == "violated"
    skipped = _cli("--task", str(task), "--candidate", wrong, "--sandbox", "none", "--json", "--no-task-probes")
    assert skipped.returncode == 0, skipped.stderr
    assert "np.affine" not in {r["property"]["id"] for r in json.loads(skipped.stdout)["results"]}


def test_a_task_named_like_a_bundled_one_runs_only_its_own_probes(tmp_path, capsys):
    task = _task_with_probe_files(tmp_path, ["probe_tiny.py"])
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('name = "tiny"', 'name = "mlp-train"'))
    args = ["probe", "--task", str(task), "--candidate", str(GOOD), "--sandbox", "none", "--no-builtin", "--json"]
    assert main(args) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    # its own three probes (misfit is the fixture's probe that does not fit), and none of mlp-train's
    assert {r["property"]["id"]: r["outcome"] for r in results} == {
        "forward.affine": "established", "forward.net": "established", "forward.misfit": "not_established",
    }  # fmt: skip


def test_a_missing_task_probe_file_is_one_line_and_exit_2(tmp_path):
    task = _task_with_probe_files(tmp_path, ["probe_numpy.py"])
    (task / "tests" / "probes" / "probe_numpy.py").unlink()
    proc = _cli("--task", str(task), "--candidate", str(GOOD), "--sandbox", "none")
    assert proc.returncode == 2
    assert "probe_files in task.toml) not found" in proc.stderr


def test_a_missing_sandbox_is_an_infrastructure_failure_exit_3(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on it
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "probe", "--task", str(TINY), "--candidate", str(GOOD),
         "--sandbox", "bwrap"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "bubblewrap (bwrap) is not installed" in proc.stderr


@pytest.mark.parametrize("error", [SandboxError("the sandbox did not start"), IsolationError("no /etc snapshot")])
def test_a_sandbox_failing_mid_run_exits_3(monkeypatch, capsys, error):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(harness.cli.probe, "run_suite", failing)
    assert main(["probe", "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none"]) == 3
    assert str(error) in capsys.readouterr().err


@pytest.mark.parametrize("keep", [False, True])
def test_the_work_directory_is_named_only_when_kept_and_then_exists(tmp_path, keep):
    cache = tmp_path / "cache"
    env = {**os.environ, "TWIN_CACHE_DIR": str(cache)}
    args = ["--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--no-builtin"]
    args += ["--probe", str(FIXTURES / "probe_numpy.py")] + (["--keep"] if keep else [])
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "probe", *args], capture_output=True, text=True, env=env
    )
    assert proc.returncode in (0, 1), proc.stderr
    named = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("probe files and outputs")]
    if not keep:
        assert named == []
        return
    (path,) = named
    assert Path(path).parent == cache / "probe-runs" and (Path(path) / "probes").is_dir()


def test_init_writes_a_skeleton_the_probe_accepts_as_not_established(tmp_path):
    skeleton = tmp_path / "probes.py"
    assert main(["probe", "--task", str(TINY), "--init", str(skeleton)]) == 0
    text = skeleton.read_text()
    assert "PROBES = {" in text and '"component": "model.Affine"' in text
    proc = _cli(
        "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--no-builtin", "--no-library",
        "--probe", str(skeleton), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    outcomes = {r["property"]["id"]: r["outcome"] for r in json.loads(proc.stdout)["results"]}
    assert outcomes and set(outcomes.values()) == {"not_established"}, outcomes
    assert main(["probe", "--task", str(TINY), "--init", str(skeleton)]) == 2  # never overwrites


def test_init_reads_a_bare_repository_before_there_is_a_task(tmp_path):
    skeleton = tmp_path / "probes.py"
    assert main(["probe", "--task", str(TINY / "environment" / "source"), "--init", str(skeleton)]) == 0
    assert '"component": "model.loss_fn"' in skeleton.read_text()
    assert main(["probe", "--task", str(tmp_path / "missing"), "--init", str(tmp_path / "x.py")]) == 2
    assert not (tmp_path / "x.py").exists()


def test_help_documents_the_exit_status():
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "0 all established, 1 any violated, 2 usage or task error, 3" in " ".join(proc.stdout.split())


BUNDLED = Path(__file__).resolve().parents[2] / "tasks"


@pytest.mark.heavy  # a sandboxed run per probe of each original
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="probes run in bwrap")
@pytest.mark.parametrize(
    ("task", "oracle"),
    [
        ("t2j-mini/mlp-train", "solution/app"),
        ("t2j-mini/llama-lora-sft", "solution/app"),
        ("t2j-mini/llama-paged-serve", "solution/app"),
        ("flask-to-starlette", "solution/app"),
        ("published/tiny-net", "solution/jax_repo"),
    ],
)
def test_init_on_every_bundled_original_is_accepted_and_never_violated(tmp_path, task, oracle):
    skeleton = tmp_path / "probes.py"
    assert main(["probe", "--task", str(BUNDLED / task), "--init", str(skeleton)]) == 0
    proc = _cli(
        "--task", str(BUNDLED / task), "--candidate", str(BUNDLED / task / oracle), "--probe", str(skeleton),
        "--no-builtin", "--no-library", "--jobs", "2", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    outcomes = {r["outcome"] for r in json.loads(proc.stdout)["results"]}
    assert outcomes == {"not_established"}
