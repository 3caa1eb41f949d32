from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert proc.returncode == 0, proc.stderr
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


def test_piped_output_is_whole_lines_with_the_deciding_numbers(tmp_path):
    proc = _cli(
        "--task", str(TINY), "--candidate", str(FIXTURES / "candidates" / "wrong"),
        "--probe", str(FIXTURES / "probe_numpy.py"), "--sandbox", "none", "--workdir", str(tmp_path / "w"),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not any(c in proc.stdout for c in "┏┃│")  # no table when not on a terminal
    assert any(line.startswith("violated        np.affine (L") for line in lines)
    deciding = [line for line in lines if "distance" in line]
    assert deciding and all(
        __import__("re").fullmatch(r"    \S+: \w+ distance \S+ > tolerance \S+ \(noise \S+\)(, uninformative)?", line)
        for line in deciding
    ), deciding
    assert any(line == f"probe files and outputs: {tmp_path / 'w'}" for line in lines)


def test_a_family_nothing_was_run_for_says_so(tmp_path):
    proc = _cli("--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--workdir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "; python (its modules define public functions" in proc.stdout
    assert "  python: nothing run: no request or request space stated for it" in proc.stdout
