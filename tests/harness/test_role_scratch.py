"""A read-only role's /scratch: written on the reference side, read on the candidate side, kept
across its commands; no scratch for a role that writes the candidate; removed when the run closes."""

from __future__ import annotations

import shutil

import pytest

from harness.models.config import ModelConfig
from harness.run.directory import RunConfig
from harness.run.session import RunInputs, open_session
from roles.tools import workbench_tools
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs the real bwrap sandbox")


@pytest.fixture
def session(tmp_path):
    config = RunConfig.build(task=plans.TINY_TASK, model="scripted:x.json", sandbox="bwrap", grade=False)
    script = tmp_path / "x.json"
    script.write_text("[]")
    config = config.model_copy(update={"model": ModelConfig(name=f"scripted:{script}")})
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    session = open_session(inputs)
    yield session
    session.close()


def test_a_read_only_roles_scratch_carries_arrays_from_the_reference_side_to_the_candidate_side(session):
    tools = workbench_tools(session.workbench("verifier", write=False), write=False)
    saved = tools["bash_reference"](command="python3 -c \"open('/scratch/ref.txt', 'w').write('42')\"")
    assert saved.ok, saved.text
    assert "42" in tools["bash_reference"](command="cat /scratch/ref.txt").text  # kept across commands
    assert "42" in tools["bash"](command="cat /scratch/ref.txt").text  # and readable on the candidate side
    refused = tools["bash"](command="echo 1 > /scratch/from_candidate.txt")
    assert not refused.ok  # read-only there: nothing flows back from the candidate side
    assert "/scratch" in tools["bash_reference"].description and "/scratch" in tools["bash"].description
    root = session.scratch_root
    assert (root / "verifier" / "ref.txt").read_text() == "42"
    assert not (session.run.candidate / "ref.txt").exists()
    session.close()
    assert not root.exists()


def test_a_role_that_writes_the_candidate_has_no_scratch(session):
    tools = workbench_tools(session.workbench("migrator", write=True), write=True)
    assert not tools["bash_reference"](command="echo 1 > /scratch/x").ok
    assert not tools["bash"](command="ls /scratch").ok
    assert "/scratch" not in tools["bash_reference"].description
    assert "nothing written on this side outlives it" in tools["bash_reference"].description
