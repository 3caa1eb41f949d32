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
