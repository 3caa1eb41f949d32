"""Process differential probes: the same argv, stdin, files and environment on both sides.

Each run gets a fresh directory seeded with the given files; what is compared is
the exit status, stdout, stderr, every file written or changed there and every
seeded file removed (a file left behind is a difference too).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from probes.services.compare import Comparison
from probes.services.matched import Probe, matched_probe


class ProcessRun(BaseModel):
    """One invocation.

    `{python}` is the side's interpreter, `{root}` its tree and `{case}` the run directory.
    """

    argv: list[str] = Field(description="Command and arguments (the same on both sides).")
    stdin: str = Field(default="", description="Standard input (UTF-8 text).")
    files: dict[str, str] = Field(
        default_factory=dict, description="Relative path -> content, created first."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    timeout_s: float = Field(default=30.0, description="Wall-time limit of the run.")

    def as_input(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "stdin": {"text": self.stdin},
            "files": {k: {"text": v} for k, v in self.files.items()},
            "env": self.env,
            "timeout_s": self.timeout_s,
        }


def process_probe(
    runs: dict[str, ProcessRun | dict[str, Any]],
    comparison: dict[str, Any] | Comparison | None = None,
    *,
    sides: dict[str, Any] | None = None,
    **options: Any,
) -> Probe:
    """A probe running each named invocation on both sides and comparing what it did."""
    cases = [
        {
            "name": name,
            "input": (ProcessRun.model_validate(r) if isinstance(r, dict) else r).as_input(),
        }
        for name, r in runs.items()
    ]
    return matched_probe(
        "process", sides or {"reference": {}, "candidate": {}}, cases, comparison, **options
    )
