"""The Migrator: the only role that writes the candidate; works towards the diagnosis objectives."""

from __future__ import annotations

from typing import Any

from ground.model import Model
from roles import prompting
from roles.agent import Agent, AgentOutcome, Submitted
from roles.role import RoundBrief
from roles.tools import Workbench, submit_tool, workbench_tools


def summary_submit_tool(description: str) -> Any:
    """`submit(summary)`: ends the role with a short account of what was done."""

    def accept(summary: str) -> None:
        raise Submitted(summary)

    return submit_tool(description, {"summary": {"type": "string"}}, accept)


class Migrator:
    """Edits `/app` and runs commands on both sides to work towards D_t."""

    role = "migrator"

    def __init__(self, model: Model, bench: Workbench, *, max_steps: int = 80, **observers: Any):
        tools = workbench_tools(bench, write=True)
        tools["submit"] = summary_submit_tool("Finish this round with a summary of what you changed.")
        self.agent = Agent(model, tools, role=self.role, max_steps=max_steps, **observers)

    def run(self, brief: RoundBrief) -> AgentOutcome:
        """Work towards `brief.diagnosis` (with the evidence it rests on, from round 2).

        The outcome's output is the Migrator's summary of what it changed.
        """
        return self.agent.run(
            prompting.render("migrator_system", candidate_dir=brief.candidate_dir),
            prompting.render(
                "migrator_task",
                round=brief.round,
                budget=brief.budget,
                instruction=brief.instruction,
                diagnosis=brief.diagnosis,
                regressions=brief.regressions,
                evidence=brief.evidence,
                cited_sources=brief.cited_sources,
            ),
            share=brief.share,
        )
