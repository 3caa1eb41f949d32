"""Whole `twin migrate --model inbox:DIR` runs driven by examples/inbox_driver.py, killed and resumed.

The driver answers from a script (scripted replies, not a model's work); what is
tested is the protocol and the resume, end to end, through the CLI.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli.app import main
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "examples" / "inbox_driver.py"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs use the bwrap sandbox")


def start_driver(inbox: Path, script: list[dict], path: Path) -> subprocess.Popen:
    path.write_text(json.dumps(script))
    inbox.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, str(DRIVER), str(inbox), str(path)], stderr=subprocess.DEVNULL)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


def kill_after(process: subprocess.Popen, reply: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not reply.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop(process)


def migrate(*args: str) -> int:
    return main(["migrate", *args])


def drive_kill_and_resume(tmp_path: Path, task: Path, script: list[dict], kill_at: int, **options: str) -> RunDir:
    """Run with the driver, kill it once it answered `kill_at` requests, resume with a new driver."""
    inbox, runs = tmp_path / "inbox", tmp_path / "runs"
    # the first driver's script ends at `kill_at`: it cannot run ahead of the kill
    driver = start_driver(inbox, script[:kill_at], tmp_path / "part.json")
    args = ["--task", str(task), "--model", f"inbox:{inbox}", "--runs-dir", str(runs), "--run-id", "r"]
    args += [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", v)]
    try:
        import threading

        killer = threading.Thread(target=kill_after, args=(driver, inbox / f"reply-{kill_at}.json"))
        killer.start()
        code = migrate(*args, "--model-wait-s", "3")
        killer.join()
    finally:
        stop(driver)
    run = RunDir(runs / "r")
    state = run.load_state()
    assert code == 75, "a driver that stopped answering stops the run with EX_TEMPFAIL"
    assert state.status == "stopped" and "no reply-" in state.stop_reason
    assert (inbox / f"expired-{kill_at + 1}.json").exists()
    assert not run.grades.exists()

    driver = start_driver(inbox, script, tmp_path / "full.json")
    try:
        code = migrate("--resume", str(run.root), "--runs-dir", str(runs), "--model-wait-s", "60")
    finally:
        stop(driver)
    assert code == 0
    assert run.load_config().model.wait_s == 60
    return run


@pytest.mark.heavy  # a run, killed and resumed
def test_inbox_run_on_tiny_task_survives_a_killed_driver_and_replays(tmp_path, capsys):
    script = plans.twin_fix_in_round_two()
    run = drive_kill_and_resume(tmp_path, plans.TINY_TASK, script, kill_at=3)
    state = run.load_state()
    assert state.status == "finished" and state.final_round == 2
    grades = json.loads(run.grades.read_text())
    assert [g["reward"] for g in grades["rounds"]] == [0.5, 1.0]
    assert "waiting for" in capsys.readouterr().err
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    assert all(c["label"].startswith("outside program via inbox") for c in calls)
    # the driver reports no usage: twin counts the tokens itself, and says they are estimated
    assert all(c["reply"]["usage"]["estimated"] and c["reply"]["usage"]["prompt_tokens"] > 0 for c in calls)
    spent = re.search(r"spent: \d+ model calls \([^)]*\), ([\d,]+) tokens \(all estimated\)", run.summary.read_text())
    assert spent is not None and int(spent.group(1).replace(",", "")) > 0
    # the migrator's first two calls were answered before the kill and asked again after the resume
    assert len(calls) == len(script) + 2
    # the recording replays, its cut-off step left out
    config = RunConfig.build(task=plans.TINY_TASK, model=f"replay:{run.trajectory}", rounds=2)
    again = RunDir.create(tmp_path / "replays", config, RunState(run_id="replay"))
    run_migration(RunInputs.read(again), SCAFFOLDS)
    assert [g["reward"] for g in json.loads(again.grades.read_text())["rounds"]] == [0.5, 1.0]


def record_examples_module():
    spec = importlib.util.spec_from_file_location("record_examples", REPO / "scripts" / "record_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_inbox_run_on_mlp_train_survives_a_killed_driver(tmp_path):
    task = REPO / "tasks" / "t2j-mini" / "mlp-train"
    script = record_examples_module().twin_plan("mlp-train")
    run = drive_kill_and_resume(tmp_path, task, script, kill_at=5)
    state = run.load_state()
    assert state.status == "finished" and state.final_round == 2
    assert state.rounds[0].evidence_score < state.rounds[1].evidence_score
    grades = json.loads(run.grades.read_text())
    assert grades["rounds"][-1]["reward"] >= 0.97
