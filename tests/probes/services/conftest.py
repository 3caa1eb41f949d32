"""Tiny tasks for the service probes: a CLI and a library in two versions (original, candidate)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from probes.context import make_context
from task_model.loader import load_task

TASK_TOML = """
[metadata.twin]
source_framework = "oldlib"
target_framework = "newlib"
forbidden_packages = ["oldlib"]
reference_packages = ["oldlib"]
"""

ORIGINAL_LIB = '''
import json

def parse_version(text):
    """'1.2.3' -> (1, 2, 3); a missing part counts as 0."""
    parts = text.strip().split(".")
    if not parts or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"bad version {text!r}")
    return tuple(int(p) for p in parts + ["0"] * (3 - len(parts)))

COUNTER = []

def bump():
    COUNTER.append(1)
    return len(COUNTER)
'''

ORIGINAL_CLI = """
import sys, os
mode = sys.argv[1] if len(sys.argv) > 1 else "upper"
text = sys.stdin.read()
if mode == "upper":
    print(text.upper(), end="")
elif mode == "save":
    with open("out.txt", "w") as fh:
        fh.write(text)
    if os.path.exists("cache.tmp"):
        os.remove("cache.tmp")
else:
    print(f"unknown mode {mode}", file=sys.stderr)
    sys.exit(2)
"""


def write_task(
    root: Path, *, lib: str = ORIGINAL_LIB, cli: str = ORIGINAL_CLI
) -> tuple[Path, Path]:
    """A task whose original holds `verlib.py` and `cli.py`; returns (task dir, candidate dir)."""
    task = root / "task"
    source = task / "environment" / "source"
    source.mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/sh\nexit 0\n")
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text("Port it.\n")
    (source / "verlib.py").write_text(textwrap.dedent(ORIGINAL_LIB))
    (source / "cli.py").write_text(textwrap.dedent(ORIGINAL_CLI))
    candidate = root / "candidate"
    candidate.mkdir()
    (candidate / "verlib.py").write_text(textwrap.dedent(lib))
    (candidate / "cli.py").write_text(textwrap.dedent(cli))
    return task, candidate


@pytest.fixture
def tiny_context(tmp_path):
    """A factory: `tiny_context(lib=..., cli=..., sandbox_kind='none')` -> ProbeContext."""
    made = []

    def build(*, lib: str = ORIGINAL_LIB, cli: str = ORIGINAL_CLI, sandbox_kind: str = "none"):
        root = tmp_path / f"t{len(made)}"
        task, candidate = write_task(root, lib=lib, cli=cli)
        ctx = make_context(
            load_task(task), candidate, sandbox_kind=sandbox_kind, workdir=root / "work", timeout_s=120
        )
        made.append(ctx)
        return ctx

    yield build
    for ctx in made:
        ctx.close()
