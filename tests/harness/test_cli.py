from __future__ import annotations

import subprocess
import sys

from harness import __version__
from harness.cli.app import main


def test_version_prints_and_exits_zero(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"twin {__version__}"


def test_help_lists_design_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("migrate", "grade", "probe", "evidence", "bench", "report", "models"):
        assert command in out


def test_unknown_command_is_one_line_and_exit_2():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "no-such-command"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "no-such-command" in proc.stderr


def test_migrate_help_shows_the_config_table_name(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["migrate", "--help"]) == 0
    assert "TOML file with a [run] table." in capsys.readouterr().out


def test_an_error_with_brackets_is_printed_whole(tmp_path, capsys):
    from harness.cli.app import main

    task = tmp_path / "t1"
    task.mkdir()
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "instruction.md").write_text("port it\n")
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/sh\n")
    assert main(["grade", "--task", str(task), "--oracle"]) == 2
    err = capsys.readouterr().err
    assert "[metadata.twin]" in err and len(err.strip().splitlines()) == 1
