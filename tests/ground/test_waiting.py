"""A wait over two seconds says what it waits for, and when it ends."""

from __future__ import annotations

import time

from ground.waiting import waiting_for


def test_a_long_wait_says_what_it_waits_for_and_when_it_is_done():
    lines: list[str] = []
    with waiting_for("a copy of\x1b[31m site-packages", say=lines.append, notice_s=0.05):
        time.sleep(0.3)
    assert len(lines) == 2
    assert lines[0].startswith("twin: waiting for a copy of\\x1b[31m site-packages (")  # its controls shown
    assert lines[1].startswith("twin: done: a copy of\\x1b[31m site-packages after ")


def test_a_wait_that_fails_leaves_the_saying_to_its_error():
    lines: list[str] = []
    try:
        with waiting_for("the references", say=lines.append, notice_s=0.05):
            time.sleep(0.3)
            raise ValueError("bad input")
    except ValueError:
        pass
    assert len(lines) == 1 and lines[0].startswith("twin: waiting for the references (")  # never "done"


def test_the_notice_comes_from_the_environment_where_it_is_set(monkeypatch):
    lines: list[str] = []
    monkeypatch.setenv("TWIN_WAIT_NOTICE_S", "0.05")
    with waiting_for("the build", say=lines.append):
        time.sleep(0.3)
    assert len(lines) == 2
    monkeypatch.setenv("TWIN_WAIT_NOTICE_S", "3600")
    with waiting_for("the build", say=lines.append):
        time.sleep(0.3)
    assert len(lines) == 2


def test_a_short_wait_says_nothing():
    lines: list[str] = []
    with waiting_for("nothing long", say=lines.append, notice_s=5.0):
        pass
    assert lines == []


def test_by_default_it_goes_to_stderr_piped_or_not(capfd):
    with waiting_for("the build", notice_s=0.05):
        time.sleep(0.2)
    err = capfd.readouterr().err
    assert "twin: waiting for the build (" in err and "twin: done: the build after" in err


def test_piped_a_status_becomes_waiting_lines_and_on_a_terminal_a_spinner(capfd, monkeypatch):
    from io import StringIO

    from ground import waiting
    from ground.terminal import agent_console
    from ground.waiting import status_or_waiting

    monkeypatch.setattr(waiting, "NOTICE_S", 0.05)
    monkeypatch.delenv("TWIN_WAIT_NOTICE_S")
    with status_or_waiting(agent_console(file=StringIO()), "grading the oracle"):
        time.sleep(0.2)
    assert "twin: waiting for grading the oracle (" in capfd.readouterr().err
    terminal = agent_console(file=StringIO(), force_terminal=True)
    with status_or_waiting(terminal, "grading the oracle"):
        time.sleep(0.2)
    assert "twin: waiting" not in capfd.readouterr().err  # the spinner says it
