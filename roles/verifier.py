"""The Verifier: read-only on the candidate; writes matched probes and runs them through the probe runner.

Outcomes are never the Verifier's say-so: only executed probes put records in the
evidence store. The Verifier decides what to examine and writes the probe files;
the `ProbeDesk` (given by the harness) stores, runs and records them.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from harness.ground.model import Model
from roles import prompting
from roles.agent import Agent, AgentOutcome, Submitted
from roles.role import RoundBrief
from roles.schemas import VerifierReport
from roles.tools import Tool, ToolError, ToolResult, Workbench, submit_tool, workbench_tools

PROBE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class ProbeDesk(Protocol):
    """Where the Verifier's probes are kept and run (outside the candidate)."""

    def write_probe(self, name: str, source: str) -> str:
        """Store a probe file (an empty source removes it); say what was done, and warn where the
        file states a property another stored probe states."""
        ...

    def run_probe(self, name: str) -> str:
        """Run a stored probe on both sides, record its results, return them as a table."""
        ...

    def run_checks(self) -> str:
        """Run the built-in candidate-side checks, record and return them."""
        ...

    def probe_format(self) -> str:
        """How a probe file is written (shown to the model)."""
        ...


def probe_tools(desk: ProbeDesk) -> list[Tool]:
    def write(name: str, source: str) -> ToolResult:
        if not isinstance(name, str) or not PROBE_NAME.fullmatch(name):
            raise ToolError("probe names are lowercase identifiers, e.g. forward_logits")
        return ToolResult(text=desk.write_probe(name, source))

    def run(name: str) -> ToolResult:
        if not isinstance(name, str) or not PROBE_NAME.fullmatch(name):
            raise ToolError(f"no probe named {name!r}"[:200])
        return ToolResult(text=desk.run_probe(name))

    def checks() -> ToolResult:
        return ToolResult(text=desk.run_checks())

    return [
        Tool(
            "write_probe",
            "Store a probe file: matched probe functions (reference side and candidate side), "
            "candidate-only checks, or a SERVICES literal of matched requests and request spaces to "
            "search for counterexamples; see the format in your instructions. It is kept outside the "
            "candidate and re-run every round; writing an empty source removes it.",
            {"name": {"type": "string"}, "source": {"type": "string"}},
            write,
        ),
        Tool(
            "run_probe",
            "Run a stored probe on the original and on the candidate with the same inputs (and its "
            "counterexample searches, with a fixed budget); the outcomes are recorded as evidence and "
            "returned: every failing output with its distance against its tolerance, and the passing ones "
            "counted, with those closest to their tolerance. A confirmed counterexample is kept and re-run "
            "in every later round.",
            {"name": {"type": "string"}},
            run,
        ),
        Tool(
            "run_checks",
            "Run the built-in candidate-side checks: imports, independence and the migration audit "
            "always; jit-traceability, gradients, parameter tree and entry points only where the task "
            "declares the functions to check. The result lists what ran and what did not, and why.",
            {},
            checks,
        ),
    ]


class Verifier:
    """Exercises the updated candidate and records what is established, violated or not established."""

    role = "verifier"

    def __init__(self, model: Model, bench: Workbench, desk: ProbeDesk, *, max_steps: int = 40, **observers: Any):
        self.desk = desk
        tools = workbench_tools(bench, write=False)
        tools.update({tool.name: tool for tool in probe_tools(desk)})

        def accept(summary: str, unchecked: list[str] | None = None) -> None:
            raise Submitted(VerifierReport(summary=summary, unchecked=unchecked or []))

        tools["submit"] = submit_tool(
            "Finish verification with a summary and the properties you could not examine, "
            "each as 'property: why' (they are recorded as not established, with your reason, beside "
            "the probes' outcomes: they never replace one; to withdraw a probe you judge wrong, "
            "rewrite it and run it again, or remove it).",
            {"summary": {"type": "string"}, "unchecked": {"type": "array", "items": {"type": "string"}}},
            accept,
        )
        tools["submit"].required = ["summary"]
        self.agent = Agent(model, tools, role=self.role, max_steps=max_steps, **observers)

    def run(self, brief: RoundBrief) -> AgentOutcome:
        """Verify round `brief.round`'s candidate; the output is the `VerifierReport`.

        `brief.evidence` is the evidence after the harness re-ran every earlier probe on
        this round's candidate (it names the commit).
        """
        return self.agent.run(
            prompting.render(
                "verifier_system", probe_format=self.desk.probe_format(), candidate_dir=brief.candidate_dir
            ),
            prompting.render(
                "verifier_task",
                round=brief.round,
                instruction=brief.instruction,
                diagnosis=brief.diagnosis,
                evidence=brief.evidence,
                migrator_summary=brief.migrator_summary,
                changed_files=brief.changed_files,
            ),
        )
