from __future__ import annotations

import json
import re

import pytest

from probes.suite import PROBE_FILE_FORMAT
from roles import prompting
from roles.agent import Submitted
from roles.diagnoser import diagnosis_submit_tool
from roles.schemas import Diagnosis
from roles.tools import ToolError
from roles.verifier import reference_section

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
    step_limit=7,
    failing=["imports (imports): FAIL"],
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
    assert "re-run of the built-in checks and every probe written in earlier rounds" in " ".join(text.split())
    first = " ".join(prompting.render("verifier_task", **{**VARIABLES, "round": 1}).split())
    assert "every probe written" not in first and "run of the built-in checks" in first
    assert "no probe was written before" in first


@pytest.mark.parametrize("name", ["diagnoser_task", "migrator_task", "verifier_system"])
def test_the_tolerance_rule_is_explained_to_the_roles_that_read_evidence(name):
    text = prompting.render(name, **VARIABLES)
    assert "T = 10 × max(N, 2^-23)" in text and "distance D > tolerance T (noise N)" in text


@pytest.mark.parametrize("name", ["diagnoser_task", "migrator_task", "diagnoser_system", "migrator_system"])
def test_a_prompt_without_evidence_does_not_explain_how_to_read_it(name):
    text = prompting.render(name, **{**VARIABLES, "round": 1, "evidence": "", "regressions": ""})
    assert "How to read the evidence" not in text


def test_the_verifier_reads_a_summary_of_the_probe_format_and_where_the_rest_is():
    summary = prompting.render("verifier_system", candidate_dir="/app")
    for needed in ("inputs_NAME(env)", "reference_NAME(env)", "candidate_NAME(env)", "check_NAME(env)", "PROBES"):
        assert needed in summary
    assert "`probe_reference` tool returns the full reference" in summary
    assert len(summary) < len(PROBE_FILE_FORMAT) / 2  # the reference is read on demand, not sent every call
    named = re.findall(r'section(?:=| )"([^"]+)"', summary)
    assert {"Metadata", "Sensitivity", "Service probes"} <= set(named)
    for section in named:  # every section the summary points to is there to read
        assert reference_section(PROBE_FILE_FORMAT, section).startswith(f"## {section}")


def test_the_diagnosis_schema_leaves_out_generated_titles_but_keeps_a_field_named_title():
    schema = diagnosis_submit_tool().schema()["function"]["parameters"]["properties"]["diagnosis"]
    assert '"title": "' not in json.dumps(schema)
    assert "title" in schema["$defs"]["Gap"]["properties"] and "title" in schema["$defs"]["Gap"]["required"]
    assert schema["properties"]["complete"]["description"]


@pytest.mark.parametrize("name", ["diagnoser_system", "migrator_system", "verifier_system", "base_system"])
def test_the_environment_names_the_candidate_where_the_task_puts_it(name):
    published = prompting.render(name, **{**VARIABLES, "candidate_dir": "/app/jax_repo"})
    assert "- `/app/jax_repo`: the candidate repository being built." in published
    assert "- `/app`: the candidate repository being built." in prompting.render(name, **VARIABLES)


def test_every_similarity_measure_is_defined_once_in_the_paragraph_the_verifier_reads():
    from probes.compare import MEASURE_NAMES

    paragraph = " ".join(prompting.render("measures").split())
    for name in (*MEASURE_NAMES, "exact"):
        assert f"`{name}` (" in paragraph, name  # each measure with what it compares, then its definition
    assert "sqrt(max(cos, 0) × min(‖a‖, ‖b‖) / max(‖a‖, ‖b‖))" in paragraph
    assert paragraph in " ".join(prompting.render("verifier_system").split())
    holders = [p.name for p in prompting.PROMPTS_DIR.glob("*.j2") if "Jensen" in p.read_text()]
    assert holders == ["measures.md.j2"]  # one source, included where evidence is read


def test_the_tensor_definition_the_prompt_states_is_what_the_probes_compute():
    import math

    import numpy as np

    from probes.similarity import tensor_similarity

    a = np.array([1.0, 2.0, 2.0])
    assert tensor_similarity(a, 2 * a) == pytest.approx(math.sqrt(1.0 * 0.5))  # right direction, twice the norm
    assert tensor_similarity(a, -a) == 0.0  # a negative cosine counts as none
