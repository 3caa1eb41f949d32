"""`twin migrate --model human` driven by typing into a real terminal (tmux send-keys / capture-pane).

What is typed is fixed by the test (the task's known answer), so these runs test
the terminal model's mechanics, not anyone's migration skill.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed (apt-get install tmux)"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs use the bwrap sandbox"),
]


class Terminal:
    """A tmux server of our own (its own socket), one window running a shell command."""

    def __init__(self, tmp_path: Path) -> None:
        self.socket = ""
        self.tmp = tmp_path

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True)
        assert done.returncode == 0, f"tmux {args[0]} failed: {done.stderr.strip()}"
        return done.stdout

    def start(self, command: str) -> None:
        self.socket = f"twin-test-{uuid.uuid4().hex[:8]}"  # a server of our own, new for every start
        script = self.tmp / f"cmd-{uuid.uuid4().hex[:6]}.sh"
        repo = shlex.quote(str(REPO))
        script.write_text(f"cd {repo}\nexport PYTHONPATH={repo} COLUMNS=200\n{command}\necho EXIT=$?\nsleep 600\n")
        self.tmux("new-session", "-d", "-x", "220", "-y", "50", "bash", str(script))
        self.tmux("set-option", "-g", "history-limit", "50000")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-50000")

    def wait_for(self, text: str, count: int = 1, timeout_s: float = 120) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            screen = self.screen()
            if screen.count(text) >= count:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} x{count} did not appear; the terminal shows:\n{self.screen()[-3000:]}")

    def type(self, *lines: str) -> None:
        for line in lines:
            if line:
                self.tmux("send-keys", "-l", line)
            self.tmux("send-keys", "Enter")

    def close(self) -> None:
        if self.socket:
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def terminal(tmp_path):
    term = Terminal(tmp_path)
    yield term
    term.close()


def twin(*args: str) -> str:
    return " ".join([shlex.quote(sys.executable), "-m", "harness.cli", "migrate", *map(shlex.quote, args)])


def answer(term: Terminal, prompts: int, *lines: str) -> int:
    """Wait for the `prompts`-th prompt, type one answer; return the prompt count to wait for next.

    (capture-pane drops trailing blanks, so the prompt is matched as 'you>'.)
    """
    term.wait_for("you>", prompts)
    term.type(*lines)
    return prompts + 1


def heredoc(call: str, text: str) -> list[str]:
    return [f"{call} <<EOF", *text.rstrip("\n").split("\n"), "EOF"]


@pytest.mark.heavy
def test_a_person_quits_then_resumes_and_drives_the_tiny_task_to_a_graded_candidate(terminal, tmp_path):
    runs = tmp_path / "runs"
    run_args = ["--task", str(plans.TINY_TASK), "--model", "human", "--scaffold", "base", "--rounds", "1"]
    terminal.start(twin(*run_args, "--runs-dir", str(runs), "--run-id", "r"))
    screen = terminal.wait_for("you>")
    assert "agent" in screen and "round 1" in screen and "tools: read_file path" in screen
    assert "Migrate the `calc` package" in screen  # the task message is shown
    terminal.type(":quit")
    screen = terminal.wait_for("EXIT=")
    assert "EXIT=75" in screen and "twin migrate --resume" in screen
    assert RunDir(runs / "r").load_state().status == "stopped"
    terminal.close()

    terminal.start(twin("--resume", str(runs / "r"), "--runs-dir", str(runs)))
    n = answer(terminal, 1, *heredoc("write_file /app/calc/__init__.py", plans.INIT))
    n = answer(terminal, n, *heredoc("write_file /app/calc/ops.py", plans.OPS_GOOD))
    n = answer(terminal, n, "bash: cd /app && python3 -c 'from calc import ops; print(ops.scale([1.0, 2.0], 3))'")
    screen = terminal.wait_for("you>", n)
    assert "[3. 6.]" in screen  # the tool's result is shown to the person
    answer(terminal, n, "submit: wrote calc with numpy")
    screen = terminal.wait_for("EXIT=", timeout_s=300)
    assert "EXIT=0" in screen and "reward 1.0000" in screen

    run = RunDir(runs / "r")
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    assert [c["reply"]["tool_calls"][0]["name"] for c in calls] == ["write_file", "write_file", "bash", "submit"]
    assert all(c["model"] == "human" and c["label"] == "a person at the terminal" for c in calls)
    # what the person typed replays without them
    config = RunConfig.build(task=plans.TINY_TASK, model=f"replay:{run.trajectory}", scaffold="base", rounds=1)
    again = RunDir.create(tmp_path / "replays", config, RunState(run_id="replay"))
    run_migration(RunInputs.read(again), SCAFFOLDS)
    assert json.loads(again.grades.read_text())["rounds"][0]["reward"] == 1.0


def oracle_files(task: Path) -> dict[str, str]:
    root = task / "solution" / "app"
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_person_drives_mlp_train_to_a_submitted_candidate_in_the_twin_loop(terminal, tmp_path):
    task = REPO / "tasks" / "t2j-mini" / "mlp-train"
    runs = tmp_path / "runs"
    terminal.start(
        twin("--task", str(task), "--model", "human", "--rounds", "1", "--runs-dir", str(runs), "--run-id", "r")
    )
    diagnosis = {"summary": "nothing migrated", "gaps": [{"title": "port", "objective": "write /app/mlp_train"}]}
    n = answer(terminal, 1, f"submit: {json.dumps(diagnosis)}")
    for rel, text in oracle_files(task).items():
        n = answer(terminal, n, *heredoc(f"write_file /app/{rel}", text))
    n = answer(terminal, n, "submit: wrote the JAX package")
    n = answer(terminal, n, "run_checks")
    n = answer(terminal, n, "submit: ran the candidate-side checks")
    screen = terminal.wait_for("EXIT=", timeout_s=1200)
    assert "EXIT=0" in screen
    run = RunDir(runs / "r")
    state = run.load_state()
    assert state.rounds[0].done == ["diagnose", "migrate", "verify"] and state.final_round == 1
    assert json.loads(run.grades.read_text())["rounds"][0]["reward"] >= 0.97
