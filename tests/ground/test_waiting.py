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
