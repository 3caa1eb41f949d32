"""Each `twin` command parses the task directory it is given once and passes the loaded `Task` down.

Every parse of a task directory goes through `task_model.loader.read_task`; the
`parses` fixture counts its calls by task, and each command below must make exactly one.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from harness.cli.app import main
from task_model import loader
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

REPO = Path(__file__).resolve().parents[2]
TINY_CALC = plans.TINY_TASK
TINY = REPO / "tests" / "probes" / "fixtures" / "tiny"
GOOD = REPO / "tests" / "probes" / "fixtures" / "candidates" / "good"

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs use the bwrap sandbox")


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """Every parse of a task directory in this process, by the task directory's name."""
    counts: Counter = Counter()
    read_task = loader.read_task

    def counting(path, *args, **kwargs):
        directory = read_task(path, *args, **kwargs)
        counts[directory.root.name] += 1
        return directory

    monkeypatch.setattr(loader, "read_task", counting)
    return counts


def test_the_counter_sees_every_load(parses):
    load_task(TINY)
    load_task(TINY)
    assert parses == {"tiny": 2}


def test_twin_grade_parses_its_task_once(parses):
    assert main(["grade", "--task", str(TINY_CALC), "--oracle", "--sandbox", "none"]) == 0
    assert parses == {"tiny-calc": 1}


def test_twin_probe_parses_its_task_once(parses):
    assert main(["probe", "--task", str(TINY), "--candidate", str(GOOD), "--sandbox", "none", "--no-library"]) == 0
    assert parses == {"tiny": 1}


@pytest.mark.heavy  # grades the oracle and an empty candidate
def test_twin_task_check_parses_its_task_once(parses, tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["task", "check", str(TINY_CALC), "--no-defects", "--sandbox", "none"]) == 0
    assert parses == {"tiny-calc": 1}


@needs_bwrap
@pytest.mark.heavy  # two whole scripted runs in bwrap
def test_twin_migrate_parses_its_task_once_new_and_resumed(parses, tmp_path):
    script = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    runs = str(tmp_path / "runs")
    argv = ["migrate", "--task", str(TINY_CALC), "--model", script, "--scaffold", "base", "--rounds", "1"]
    assert main([*argv, "--runs-dir", runs, "--run-id", "r"]) == 0  # graded too: the grader gets the loaded task
    assert parses == {"tiny-calc": 1}
    parses.clear()
    assert main(["migrate", "--resume", "r", "--runs-dir", runs]) == 0
    assert parses == {"tiny-calc": 1}


@needs_bwrap
@pytest.mark.heavy  # a whole bench: its trial runs `twin migrate` in a process of its own
def test_twin_bench_parses_each_task_once_in_its_own_process(parses, tmp_path):
    script = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    argv = ["bench", "--tasks", str(TINY_CALC), "--model", script, "--scaffold", "base", "--rounds", "1"]
    assert main([*argv, "--benches-dir", str(tmp_path / "benches"), "--no-report"]) == 0
    assert parses == {"tiny-calc": 1}  # the command's load, the trial's post-run checks included


def test_a_note_on_stderr_shows_the_tasks_controls_as_escapes(capsys):
    from task_model.loader import say_on_stderr

    say_on_stderr("note: Dockerfile:2: RUN \x1b]0;owned\x07 \r\x1b[2J\u202e done")
    err = capsys.readouterr().err
    assert err == "note: Dockerfile:2: RUN \\x1b]0;owned\\x07 \\x0d\\x1b[2J\\u202e done\n"
