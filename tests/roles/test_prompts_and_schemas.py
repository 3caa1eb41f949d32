from __future__ import annotations

import re

import pytest

from roles import prompting
from roles.agent import Submitted
from roles.diagnoser import diagnosis_submit_tool
from roles.schemas import Diagnosis
from roles.tools import ToolError

VARIABLES = dict(
    round=2,
    instruction="INSTR",
    evidence="EVID",
    regressions="REGR",
    candidate_files="FILES",
    diagnosis="DIAG",
    probe_format="FORMAT",
    objectives=[("OBJ", "done"), ("OBJ2", "open: p not established")],
    unchecked=[("UNCH", "WHY")],
    migrator_summary="MIGSUM",
    verifier_summary="VERSUM",
    changed_files=["CHANGED.py (+1 -0)"],
)


@pytest.mark.parametrize("name", prompting.template_names())
def test_every_template_renders_and_never_mentions_hidden_state(name):
    text = prompting.render(name, **VARIABLES)
    assert text
    for word in ("grader", "reward", "hidden test", "solution/", "/tests", "task.toml", "score"):
        assert not re.search(re.escape(word), text, re.IGNORECASE), (name, word)


def test_missing_variable_is_an_error():
    with pytest.raises(Exception, match="undefined"):
        prompting.render("diagnoser_task", round=1)


def test_diagnosis_is_validated_and_retried_once():
    tool = diagnosis_submit_tool()
    with pytest.raises(ToolError, match="invalid diagnosis"):
        tool(diagnosis={"gaps": "not a list"})
    with pytest.raises(Submitted) as second:
        tool(diagnosis={"gaps": "still wrong"})
    assert second.value.output is None


def test_valid_diagnosis_is_submitted_and_renders_for_the_migrator():
    tool = diagnosis_submit_tool()
    payload = {
        "summary": "model missing",
        "gaps": [{"title": "RMSNorm", "objective": "port it", "evidence": ["forward"], "priority": 1}],
    }
    with pytest.raises(Submitted) as done:
        tool(diagnosis=payload)
    diagnosis = done.value.output
    assert isinstance(diagnosis, Diagnosis)
    assert "[P1] RMSNorm" in diagnosis.render() and "objective: port it" in diagnosis.render()


def test_the_diagnoser_sees_objectives_marked_unchecked_properties_and_the_migrators_words():
    text = prompting.render("diagnoser_task", **VARIABLES)
    assert "```data\n- OBJ — done\n- OBJ2 — open: p not established\n```" in text
    assert "```data\n- UNCH — WHY\n```" in text
    assert "Migrator reported (its own words, not verified)\n[migrator summary: " in text
    assert "```data\nMIGSUM\n```" in text and "```data\nVERSUM\n```" in text


def test_the_verifier_sees_what_changed_and_that_earlier_probes_were_re_run():
    text = prompting.render("verifier_task", **VARIABLES)
    assert "```data\n- CHANGED.py (+1 -0)\n```" in text and "(its words, not verified):\n[migrator summary: " in text
    assert "re-ran the built-in checks and every probe written in earlier rounds" in text
    first = " ".join(prompting.render("verifier_task", **{**VARIABLES, "round": 1}).split())
    assert "every probe written" not in first and "no probe was written in an earlier round" in first


@pytest.mark.parametrize("name", ["diagnoser_system", "verifier_system"])
def test_the_tolerance_rule_is_explained_to_the_roles_that_read_evidence(name):
    text = prompting.render(name, **VARIABLES)
    assert "T = 10 × max(N, 2^-23)" in text and "distance D > tolerance T (noise N)" in text


@pytest.mark.parametrize("name", ["diagnoser_system", "migrator_system", "verifier_system", "base_system"])
def test_the_environment_names_the_candidate_where_the_task_puts_it(name):
    published = prompting.render(name, **{**VARIABLES, "candidate_dir": "/app/jax_repo"})
    assert "- `/app/jax_repo`: the candidate repository being built." in published
    assert "- `/app`: the candidate repository being built." in prompting.render(name, **VARIABLES)
