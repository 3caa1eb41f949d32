"""Agent-controlled text on the terminal is text: never markup, never escape sequences, never a crash.

Every CLI view that shows what an agent, a candidate, a grader or a task wrote
(`twin grade`, `twin probe`, `twin evidence show` and `diff`, `twin migrate`'s live
lines, panel and closing lines, the inbox's refusal line) prints fields holding rich
markup (`[/]`, `[bold]`), terminal escape sequences (conceal, a window-title OSC, a
carriage return) and 10 kB lines. Each view must not crash, must show the literal
text with its control characters as visible escapes, and must send none of the
agent's escape sequences.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from benchmark_adapter.grading.grader import Grade
from evidence_store.records import EvidenceRecord, Outcome, ProbeResult, Property
from evidence_store.store import STORE_FILENAME, EvidenceStore
from ground.terminal import agent_console
from harness.cli import grade as grade_cli
from harness.cli import options
from harness.cli import probe as probe_cli
from harness.cli.app import main
from harness.run.progress import Progress, RunView

MARKUP = "[/][bold]B[/bold][white on white]HIDDEN[/]"
ESCAPES = "\x1b[8mCONCEAL\x1b[0m\x1b]0;TITLE\x07\rOVER"
SHOWN_ESCAPES = "\\x1b[8mCONCEAL\\x1b[0m\\x1b]0;TITLE\\x07\\x0dOVER"
HOSTILE = MARKUP + ESCAPES
LONG = HOSTILE + "L" * 10_000



def _task(name: str) -> SimpleNamespace:
    """A loaded task as `twin grade` reads it: its name, where its candidate goes, no published layout."""
    return SimpleNamespace(name=name, settings=SimpleNamespace(candidate_mount="/app"), environment=None)

def assert_literal(out: str, *, long: bool = True) -> None:
    assert MARKUP in out, "markup was read as markup (restyled, hidden or dropped)"
    assert SHOWN_ESCAPES in out, "control characters were not shown as escapes"
    for raw in ("\x1b[8m", "\x1b]0;", "\x07", "\rOVER"):
        assert raw not in out, f"the agent's {raw!r} reached the terminal"
    if long:
        assert "L" * 10_000 in out, "a 10 kB line was cut or wrapped"


@pytest.fixture(params=[False, True], ids=["plain", "terminal"])
def console_out(request):
    buffer = io.StringIO()
    console = agent_console(file=buffer, width=30_000, force_terminal=request.param, color_system=None)
    return console, buffer


def test_twin_grade_writes_out_first_and_prints_a_hostile_grade_literally(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "30000")
    hostile = Grade(
        task=HOSTILE,
        candidate=str(tmp_path),
        reward=0.0,
        components={LONG: 0.5},
        checks={LONG: {"score": 0.0, "detail": HOSTILE}},
        returncode=1,
        duration_s=0.1,
        sandbox="none",
        error=HOSTILE,
    )
    monkeypatch.setattr(options, "load_task_option", lambda *a, **k: _task(HOSTILE))
    monkeypatch.setattr(grade_cli, "run_grader", lambda *a, **k: hostile)
    out = tmp_path / "grade.json"
    assert main(["grade", "--task", str(tmp_path), "--candidate", str(tmp_path), "--out", str(out)]) == 2
    assert json.loads(out.read_text())["error"] == HOSTILE
    captured = capsys.readouterr()
    assert_literal(captured.out)
    assert_literal(captured.err, long=False)  # the one error line


def test_twin_grade_keeps_its_out_file_when_printing_fails(tmp_path, monkeypatch):
    grade = Grade(task="t", candidate="c", reward=1.0, returncode=0, duration_s=0.1, sandbox="none")
    monkeypatch.setattr(options, "load_task_option", lambda *a, **k: _task("t"))
    monkeypatch.setattr(grade_cli, "run_grader", lambda *a, **k: grade)
    monkeypatch.setattr(grade_cli, "_print_grade", lambda *a: 1 / 0)
    out = tmp_path / "grade.json"
    with pytest.raises(ZeroDivisionError):
        main(["grade", "--task", str(tmp_path), "--candidate", str(tmp_path), "--out", str(out)])
    assert json.loads(out.read_text())["reward"] == 1.0


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
def test_twin_probe_shows_a_hostile_result_literally(tmp_path, monkeypatch, capsys, terminal):
    from contextlib import contextmanager

    monkeypatch.setenv("COLUMNS", "30000")
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setenv("NO_COLOR", "1")
    result = ProbeResult(
        property=Property(id=LONG, kind="differential", level=1, description=HOSTILE),
        outcome=Outcome.VIOLATED,
        trace=f"Traceback:\n  File '/app/x.py'\nValueError: {LONG}",
    )
    task = SimpleNamespace(name=HOSTILE, root=tmp_path, settings=SimpleNamespace(probe_files=[]))
    ctx = SimpleNamespace(task=task, candidate=tmp_path, workdir=tmp_path, keep=True)

    @contextmanager
    def suite(*_a, **_k):
        yield SimpleNamespace(ctx=ctx, results=[result])

    monkeypatch.setattr(options, "load_task_option", lambda *a, **k: task)
    monkeypatch.setattr(probe_cli, "builtin_checks", lambda _task: ["a probe"])
    monkeypatch.setattr(probe_cli, "task_probes", lambda *a: [])
    monkeypatch.setattr(probe_cli, "run_suite", suite)
    monkeypatch.setattr(probe_cli, "localize_divergence", lambda *a: None)
    monkeypatch.setattr(probe_cli, "probe_families", lambda _task: {"http": HOSTILE})
    assert main(["probe", "--task", str(tmp_path), "--candidate", str(tmp_path)]) == 1  # one violated
    assert_literal(capsys.readouterr().out)


@pytest.fixture
def hostile_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "30000")
    path = tmp_path / "runs" / "r1"
    path.mkdir(parents=True)

    def record(round: int, outcome: str) -> EvidenceRecord:
        return EvidenceRecord(
            run_id="r1",
            round=round,
            outcome=Outcome(outcome),
            property=Property(id=LONG, kind="differential", level=1, description=HOSTILE),
            trace=f"ValueError: {LONG}",
        )

    with EvidenceStore(path / STORE_FILENAME) as store:
        store.append_many([record(1, "established")])
        store.append_many([record(2, "violated")])
    return path


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
@pytest.mark.parametrize("view", [["show", "r1"], ["diff", "r1", "1", "2"]], ids=["show", "diff"])
def test_twin_evidence_views_show_hostile_records_literally(hostile_run, capsys, monkeypatch, view, terminal):
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setenv("NO_COLOR", "1")
    assert main(["evidence", *view]) == 0
    out = capsys.readouterr().out
    assert_literal(out, long=view[0] == "show" or not terminal)
    assert LONG[: len(HOSTILE) + 100] in out.replace("\\x1b", "\x1b") or MARKUP in out


def test_twin_migrate_live_lines_and_panel_show_agent_text_literally(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "30000")
    with Progress(RunView("run", "twin", HOSTILE, 2), live=False) as progress:
        progress.message(LONG)
    assert_literal(capsys.readouterr().err)
    panel = io.StringIO()
    live_console = agent_console(file=panel, width=30_000, force_terminal=True, color_system=None)
    with Progress(RunView("run", "twin", HOSTILE, 2), live_console, live=True) as progress:
        progress.message(HOSTILE)
    assert_literal(panel.getvalue(), long=False)


def test_the_inbox_refusal_line_shows_a_hostile_tool_name_literally(tmp_path, capsys, monkeypatch):
    import threading
    import time

    from harness.models.inbox import InboxModel

    monkeypatch.setenv("COLUMNS", "30000")
    model = InboxModel(tmp_path / "inbox", wait_s=5)
    bad = {"tool_calls": [{"id": "a", "function": {"name": LONG, "arguments": "{}"}}]}
    (tmp_path / "inbox" / "reply-1.json").write_text(json.dumps(bad))

    def answer_again():
        while not (tmp_path / "inbox" / "error-1.json").exists():
            time.sleep(0.02)
        (tmp_path / "inbox" / "reply-1.json").write_text(json.dumps({"content": "ok"}))

    threading.Thread(target=answer_again, daemon=True).start()
    tools = [{"type": "function", "function": {"name": "submit", "parameters": {"type": "object"}}}]
    assert model.query([{"role": "user", "content": "go"}], tools).content == "ok"
    out = capsys.readouterr().err
    assert MARKUP in out and "L" * 10_000 in out  # the reason names the tool as Python's repr does
    assert not any(raw in out for raw in ("\x1b[8m", "\x1b]0;", "\x07", "\r"))
