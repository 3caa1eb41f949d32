"""Every role takes a `RoundBrief` and returns an `AgentOutcome` whose output is its own record."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from ground.boundary import Boundary, Mount
from harness.models.scripted import ScriptedModel
from roles.agent import AgentOutcome
from roles.diagnoser import Diagnoser
from roles.migrator import Migrator
from roles.role import Role, RoundBrief
from roles.schemas import Diagnosis, VerifierReport
from roles.tools import ToolError, Workbench
from roles.verifier import Verifier

DIAGNOSIS = {"summary": "nothing yet", "gaps": [], "complete": False}


class Desk:
    def write_probe(self, name: str, source: str) -> str:
        return name

    def run_probe(self, name: str) -> str:
        return ""

    def run_checks(self) -> str:
        return ""

    def probe_format(self) -> str:
        return "# Probe files\nintro\n\n## Functions\nthe table\n\n## Metadata\nPROBES literal\n"


def submitting(arguments: dict) -> ScriptedModel:
    return ScriptedModel([{"tool_calls": [{"name": "submit", "arguments": arguments}]}])


def bench(tmp_path) -> Workbench:
    (tmp_path / "app").mkdir()
    boundary = Boundary(name="role", mounts=[Mount(host=tmp_path / "app", inside="/app")], workdir="/app")
    return Workbench(boundary=boundary, candidate=SimpleNamespace(), reference=SimpleNamespace())


CASES = [
    ("diagnoser", lambda m, b: Diagnoser(m, b), {"diagnosis": DIAGNOSIS}, Diagnosis),
    ("migrator", lambda m, b: Migrator(m, b), {"summary": "ported it"}, str),
    ("verifier", lambda m, b: Verifier(m, b, Desk()), {"summary": "checked"}, VerifierReport),
]


@pytest.mark.parametrize("name,build,arguments,output_type", CASES, ids=[c[0] for c in CASES])
def test_a_role_runs_on_a_round_brief(tmp_path, name, build, arguments, output_type):
    role: Role = build(submitting(arguments), bench(tmp_path))
    brief = RoundBrief(round=3, instruction="PORT-THIS-REPO", diagnosis="GAP-ONE", evidence="EVIDENCE-SO-FAR")
    outcome = role.run(brief)
    assert role.role == name
    assert isinstance(outcome, AgentOutcome) and outcome.exit == "submitted"
    assert isinstance(outcome.output, output_type)
    task_prompt = outcome.messages[1]["content"]
    assert "PORT-THIS-REPO" in task_prompt and "Round 3" in task_prompt
    if name != "verifier":  # the Diagnoser and, from round 2, the Migrator read the evidence
        assert "EVIDENCE-SO-FAR" in task_prompt


def test_the_migrator_of_round_one_has_no_evidence_heading(tmp_path):
    outcome = Migrator(submitting({"summary": "ported"}), bench(tmp_path)).run(
        RoundBrief(round=1, instruction="PORT", diagnosis="GAP")
    )
    assert "# Evidence" not in outcome.messages[1]["content"]


def test_the_verifier_reads_the_whole_probe_reference_or_one_section_on_demand(tmp_path):
    reference = Verifier(submitting({"summary": "checked"}), bench(tmp_path), Desk()).agent.tools["probe_reference"]
    assert reference.schema()["function"]["parameters"]["required"] == []
    assert reference().text == Desk().probe_format()
    assert reference(section="metadata").text == "## Metadata\nPROBES literal"
    assert reference(section="## Functions").text == "## Functions\nthe table"
    with pytest.raises(ToolError, match="no section 'Outcomes'; the sections are: Functions, Metadata"):
        reference(section="Outcomes")


def test_the_verifier_submit_says_unchecked_entries_never_replace_an_outcome_nor_hold_the_run_open(tmp_path):
    verifier = Verifier(submitting({"summary": "checked"}), bench(tmp_path), Desk())
    description = verifier.agent.tools["submit"].description
    assert "never replace" in description and "outside the evidence's totals" in description
    assert "never hold the run open" in description and "write a probe for it" in description


@pytest.mark.parametrize("cls", [Diagnoser, Migrator, Verifier])
def test_every_role_has_the_one_run_signature(cls):
    assert list(inspect.signature(cls.run).parameters) == ["self", "brief"]
    assert list(inspect.signature(Role.run).parameters) == ["self", "brief"]
