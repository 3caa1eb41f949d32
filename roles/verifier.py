"""The Verifier: read-only on the candidate; writes matched probes and runs them through the probe runner.

Outcomes are never the Verifier's say-so: only executed probes put records in the
evidence store. The Verifier decides what to examine and writes the probe files;
the `ProbeDesk` (given by the harness) stores, runs and records them. Writing a probe runs it at
once: a probe is written to be run, and the candidate does not change during the Verifier's turn, so
there is no separate call to run it (nor one to run an unchanged probe again). Its prompt carries a
summary of the probe-file format (`prompts/probe_format.md.j2`); the whole reference
(`probes/README.md`, the desk's `probe_format()`) is read on demand with `probe_reference`.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from ground.model import Model
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
        """The full probe-file reference, in Markdown sections (`## Heading`), read on demand."""
        ...


def probe_tools(desk: ProbeDesk) -> list[Tool]:
    def write(name: str, source: str) -> ToolResult:
        if not isinstance(name, str) or not PROBE_NAME.fullmatch(name):
            raise ToolError("probe names are lowercase identifiers, e.g. forward_logits")
        stored = desk.write_probe(name, source)
        if not isinstance(source, str) or not source.strip():
            return ToolResult(text=stored)
        return ToolResult(text=f"{stored}\n{desk.run_probe(name)}")

    def checks() -> ToolResult:
        return ToolResult(text=desk.run_checks())

    def reference(section: str = "") -> ToolResult:
        return ToolResult(text=reference_section(desk.probe_format(), section))

    return [
        Tool(
            "write_probe",
            "Store a probe file and run it: matched probe functions (reference side and candidate side), "
            "candidate-only checks, or a SERVICES literal of matched requests and request spaces to "
            "search for counterexamples (the format: your instructions and `probe_reference`). Both sides "
            "run with the same inputs; the outcomes are recorded as evidence and returned (every failing "
            "output with its distance against its tolerance; the passing ones counted, with those closest "
            "to their tolerance). The file is kept outside the candidate and re-run every round (a "
            "confirmed counterexample too); writing an empty source removes it.",
            {"name": {"type": "string"}, "source": {"type": "string"}},
            write,
        ),
        Tool(
            "run_checks",
            "Run the built-in candidate-side checks: imports, independence and the migration audit "
            "always; jit-traceability, gradients, parameter tree and entry points only where the task "
            "declares the functions to check. The result lists what ran and what did not, and why. twin "
            "ran them on this round's candidate before your turn (their outcomes are in your evidence) and the "
            "candidate does not change during it: call this only where they did not run.",
            {},
            checks,
        ),
        Tool(
            "probe_reference",
            "The full probe-file reference your instructions summarise; with `section`, only the "
            "section whose heading starts with it (e.g. Functions, Outputs, Metadata, How the tolerance "
            "is set, Outcomes, Example, Sensitivity, Service probes).",
            {"section": {"type": "string"}},
            reference,
            required=[],
        ),
    ]


def reference_section(reference: str, section: str) -> str:
    """`reference` whole, or its `## ` section whose heading starts with `section` (case ignored).

    An unknown section is answered with the headings there are, so the model can ask again.
    """
    if not isinstance(section, str) or not section.strip():
        return reference
    parts = re.split(r"^(?=## )", reference, flags=re.MULTILINE)
    wanted = section.strip().lstrip("#").strip().lower()
    for part in parts:
        if part.startswith("## ") and part[3:].lower().startswith(wanted):
            return part.strip()
    headings = [part[3:].splitlines()[0] for part in parts if part.startswith("## ")]
    raise ToolError(f"no section {section.strip()[:80]!r}; the sections are: {', '.join(headings)}")


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
            "each as 'property: why'. They are recorded as not established, with your reason, for the next "
            "Diagnoser to read, but outside the evidence's totals: they never replace a probe's outcome and "
            "never hold the run open (it stops once every property the checks and probes recorded is "
            "established and a Diagnoser finds nothing left, whatever is listed here); to keep something "
            "open, write a probe for it. To withdraw a probe you judge wrong, rewrite it and run it again, "
            "or remove it.",
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
            prompting.render("verifier_system", candidate_dir=brief.candidate_dir),
            prompting.render(
                "verifier_task",
                round=brief.round,
                budget=brief.budget,
                instruction=brief.instruction,
                diagnosis=brief.diagnosis,
                evidence=brief.evidence,
                migrator_summary=brief.migrator_summary,
                changed_files=brief.changed_files,
            ),
            share=brief.share,
        )
