"""The Diagnoser: reads the candidate (read-only), the source and the evidence; outputs D_t."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ground.model import Model
from roles import prompting
from roles.agent import Agent, AgentOutcome, Submitted
from roles.role import RoundBrief
from roles.schemas import Diagnosis
from roles.tools import Tool, ToolError, Workbench, submit_tool, workbench_tools


def diagnosis_submit_tool(attempts_allowed: int = 2) -> Tool:
    """`submit(diagnosis)`: validated against `Diagnosis`; one invalid attempt is sent back.

    After `attempts_allowed` invalid attempts the role ends with output None, which the
    loop replaces by a diagnosis derived from the evidence.
    """
    attempts = {"n": 0}

    def accept(diagnosis: Any) -> None:
        attempts["n"] += 1
        try:
            parsed = Diagnosis.model_validate(diagnosis)
        except ValidationError as exc:
            if attempts["n"] >= attempts_allowed:
                raise Submitted(None) from None
            raise ToolError(f"invalid diagnosis, fix it and submit again:\n{exc}") from None
        raise Submitted(parsed)

    return submit_tool(
        "Submit the diagnosis: an object with `summary`, `gaps` (each with `title`, `evidence`, "
        "`objective`, `probes`, `sources`, `priority` 1-3) and `complete`.",
        {"diagnosis": without_titles(Diagnosis.model_json_schema())},
        accept,
    )


def without_titles(schema: Any) -> Any:
    """A JSON schema without pydantic's generated `title`s, which repeat each field's name in
    every call's tool list (a field that is itself named `title` stays)."""
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kept = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            kept[key] = {name: without_titles(sub) for name, sub in value.items()}
        else:
            kept[key] = without_titles(value)
    return kept


class Diagnoser:
    """Turns evidence into localized repair objectives. It cannot write the candidate."""

    role = "diagnoser"

    def __init__(self, model: Model, bench: Workbench, *, max_steps: int = 30, **observers: Any):
        tools = workbench_tools(bench, write=False)
        tools["submit"] = diagnosis_submit_tool()
        self.agent = Agent(model, tools, role=self.role, max_steps=max_steps, **observers)

    def run(self, brief: RoundBrief) -> AgentOutcome:
        """Diagnose `brief.round`; the output is the `Diagnosis`, or None if the role ended without a valid one."""
        return self.agent.run(
            prompting.render("diagnoser_system", candidate_dir=brief.candidate_dir),
            prompting.render(
                "diagnoser_task",
                round=brief.round,
                budget=brief.budget,
                instruction=brief.instruction,
                evidence=brief.evidence,
                regressions=brief.regressions,
                candidate_files=brief.candidate_files,
                objectives=brief.objectives,
                unchecked=brief.unchecked,
                migrator_summary=brief.migrator_summary,
                verifier_summary=brief.verifier_summary,
                candidate_dir=brief.candidate_dir,
            ),
            share=brief.share,
        )
