"""A published task's Dockerfile lays out nothing from outside its build context.

`COPY . /app/` lays out every entry of `environment/`; a link there to a host
directory, or to a sibling task's hidden tests (`../../other-task/tests`), would be
mounted where it points and read by the Migrator. Each laid-out path is resolved and
refused when it leads out, with one line naming the task, whether it is a whole-context
entry, a named source or a glob match; a layout without such links still loads.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from task_model.loader import load_task
from task_model.model import TaskError
from tests.task_model.test_published import INSTRUCTION, make_task

SECRET = "SIBLING-TASK-HIDDEN-TEST-3c1d"


def tasks_with_a_sibling(tmp_path: Path, dockerfile: str) -> Path:
    """tasks/victim (a task whose tests hold SECRET) and tasks/attacker (the task to load), side by side."""
    victim = tmp_path / "tasks" / "victim"
    (victim / "tests").mkdir(parents=True)
    (victim / "tests" / "test_hidden.py").write_text(f"# {SECRET}\n")
    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "private.txt").write_text(SECRET)
    return make_task(tmp_path / "tasks" / "attacker", dockerfile=dockerfile, instruction=INSTRUCTION)


WHOLE = "FROM python:3.11-slim\nCOPY . /app/\n"
NAMED = "FROM python:3.11-slim\nCOPY torch_orig /app/torch_orig\nCOPY {link} /app/{link}\n"
GLOB = "FROM python:3.11-slim\nCOPY torch_orig /app/torch_orig\nCOPY *link /app/extra/\n"


@pytest.mark.parametrize("dockerfile", [WHOLE, NAMED, GLOB], ids=["whole-context", "named", "glob"])
@pytest.mark.parametrize(
    "link, target",
    [("siblink", "../../victim/tests"), ("hostlink", "HOST")],
    ids=["sibling-tests", "host-dir"],
)
def test_a_link_leading_out_of_the_build_context_is_refused_in_one_line(tmp_path, dockerfile, link, target):
    root = tasks_with_a_sibling(tmp_path, dockerfile.format(link=link))
    os.symlink(str(tmp_path / "host-dir") if target == "HOST" else target, root / "environment" / link)
    with pytest.raises(TaskError) as refused:
        load_task(root)
    message = str(refused.value)
    assert "\n" not in message and "task attacker" in message and link in message
    assert "outside the build context" in message


def test_the_same_task_without_links_loads_and_lays_out_only_its_context(tmp_path):
    root = tasks_with_a_sibling(tmp_path, WHOLE)
    task = load_task(root)
    context = (root / "environment").resolve()
    hosts = [c.host for c in task.environment.copies]
    assert hosts and all(h == context or context in h.parents for h in hosts)
    assert {c.inside for c in task.environment.copies} >= {"/app/torch_orig", "/app/checkpoint"}
