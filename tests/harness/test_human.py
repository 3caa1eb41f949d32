"""`--model human` with its input scripted: what it shows, what it sends, how it stops."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ground.errors import TwinError
from ground.model import ModelStopped
from ground.trajectory import Trajectory
from harness.models.config import ModelConfig
from harness.models.factory import make_model
from harness.models.human import HumanModel
from tests.harness.test_human_syntax import SUBMIT_SUMMARY, TOOLS

SYSTEM = {"role": "system", "content": "You are the Migrator. SYSTEM-TEXT"}
TASK = {"role": "user", "content": "Port calc. TASK-TEXT"}


def human(lines, tmp_path, evidence=None):
    answers = iter(lines)
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        try:
            return next(answers)
        except StopIteration:
            raise EOFError from None

    out = io.StringIO()
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    trajectory.set_context(round=1, step=0)
    model = HumanModel(trajectory=trajectory, evidence_path=evidence, console=Console(file=out, width=200), ask=ask)
    return model, out, asked


def test_first_request_shows_role_round_prompt_and_tools_and_sends_a_tool_call(tmp_path):
    model, out, _ = human(["bash: ls /app"], tmp_path)
    reply = model.query([SYSTEM, TASK], TOOLS, role="migrator")
    shown = out.getvalue()
    assert "migrator" in shown and "round 1" in shown
    assert "SYSTEM-TEXT" in shown and "TASK-TEXT" in shown
    assert "write_file path content" in shown and "run_checks" in shown
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("human_1", "bash", {"command": "ls /app"})]


def test_later_requests_show_only_the_new_tool_results_and_the_system_prompt_once(tmp_path):
    model, out, _ = human(["bash: ls /app", "> done looking", "submit: ok"], tmp_path)
    first = model.query([SYSTEM, TASK], TOOLS, role="migrator")
    history = [
        SYSTEM,
        TASK,
        first.as_message(),
        {"role": "tool", "tool_call_id": "human_1", "name": "bash", "content": "RESULT-1"},
    ]
    before = len(out.getvalue())
    second = model.query(history, TOOLS, role="migrator")
    new = out.getvalue()[before:]
    assert "RESULT-1" in new and "TASK-TEXT" not in new and "SYSTEM-TEXT" not in new
    assert second.content == "done looking" and not second.tool_calls
    # another role's turn with the same system prompt: the prompt is not shown again
    before = len(out.getvalue())
    model.query([SYSTEM, {"role": "user", "content": "Round 2. NEXT-TASK"}], [SUBMIT_SUMMARY], role="migrator")
    new = out.getvalue()[before:]
    assert "NEXT-TASK" in new and "SYSTEM-TEXT" not in new and "same system prompt" in new


def test_bad_answers_and_commands_are_handled_before_an_answer_is_sent(tmp_path):
    lines = ["bsh: ls", ":help", ":tools", ":prompt", ":evidence", "write_file /app/a.py <<EOF", "x = 1", "EOF"]
    model, out, asked = human(lines, tmp_path)
    reply = model.query([SYSTEM, TASK], TOOLS, role="migrator")
    shown = out.getvalue()
    assert "no tool named 'bsh'" in shown
    assert "here-document" in shown  # :help shows the syntax
    assert '"name": "write_file"' in shown  # :tools shows the schemas
    assert shown.count("SYSTEM-TEXT") == 2  # once with the request, once for :prompt
    assert "no evidence recorded yet" in shown
    assert asked[-2:] == ["...  ", "...  "]  # the here-document's body was read as continuation lines
    assert reply.tool_calls[0].arguments == {"path": "/app/a.py", "content": "x = 1\n"}


@pytest.mark.parametrize("lines", [[":quit"], []], ids=["quit", "end-of-input"])
def test_quit_and_end_of_input_stop_the_run(tmp_path, lines):
    model, _, _ = human(lines, tmp_path)
    with pytest.raises(ModelStopped, match="person at the terminal"):
        model.query([SYSTEM, TASK], TOOLS, role="agent")


def test_evidence_command_shows_the_stores_summary(tmp_path):
    from evidence_store.store import EvidenceStore
    from tests.evidence_store.conftest import record

    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        store.append(record("calc.ops", "violated", 1))
    model, out, _ = human([":evidence", "run_checks"], tmp_path, evidence=tmp_path / "evidence.sqlite")
    model.query([SYSTEM, TASK], TOOLS, role="diagnoser")
    assert "calc.ops" in out.getvalue()


def test_human_model_is_recorded_as_a_person_and_needs_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    model = make_model(ModelConfig(name="human"), trajectory=Trajectory(tmp_path / "t.jsonl"))
    assert model.name == "human" and model.label == "a person at the terminal"
    with pytest.raises(TwinError, match="needs a terminal"):
        model.query([SYSTEM, TASK], TOOLS)
    with pytest.raises(TwinError, match="takes no argument"):
        make_model(ModelConfig(name="human:alice"))


def test_migrate_refuses_human_without_a_terminal_before_making_a_run(tmp_path, monkeypatch, capsys):
    from harness.cli.app import main
    from tests.harness import loop_scripts as plans

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    runs = tmp_path / "runs"
    code = main(["migrate", "--task", str(plans.TINY_TASK), "--model", "human", "--runs-dir", str(runs)])
    assert code == 2 and "needs a terminal" in capsys.readouterr().err
    assert not runs.exists()
