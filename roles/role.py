"""What every role takes and returns: one round's brief in, the agent's outcome out.

The loop builds a `RoundBrief` for each step and calls `role.run(brief)`; a role
renders its prompts from the fields its templates name and leaves the others
alone. Each role says what its `AgentOutcome.output` is: the Diagnoser a
`Diagnosis` (None when it ended without a valid one), the Migrator its summary
(a string), the Verifier a `VerifierReport`; on a step limit it is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from roles.agent import AgentOutcome, ShareGauge
from roles.prompting import CANDIDATE_DIR


@dataclass(frozen=True)
class RoundBrief:
    """What the loop hands a role for one round; text that came from an agent arrives fenced."""

    round: int
    """The round being worked (1-based)."""
    instruction: str
    """The task's instruction, as the agent may read it."""
    evidence: str = ""
    """The evidence so far, rendered for the prompt."""
    regressions: str = ""
    """Properties that went from established to violated, rendered for the prompt."""
    diagnosis: str = ""
    """This round's diagnosis, rendered (Migrator, Verifier)."""
    cited_sources: str = ""
    """The original's text at the spans the diagnosis cites, fenced (Migrator)."""
    candidate_files: str = ""
    """The candidate's file names (Diagnoser)."""
    objectives: list[tuple[str, str]] = field(default_factory=list)
    """The previous diagnosis's objectives as (objective, 'done' or 'open ...') (Diagnoser)."""
    unchecked: list[tuple[str, str]] = field(default_factory=list)
    """What the previous Verifier could not examine, as (property, why) (Diagnoser)."""
    migrator_summary: str = ""
    """What the Migrator said it changed, in its own words (Diagnoser: the previous round's)."""
    changed_files: list[str] = field(default_factory=list)
    """The round's diff stat against the previous round (Verifier)."""
    verifier_summary: str = ""
    """What the previous Verifier reported it checked and found, in its own words (Diagnoser)."""
    candidate_dir: str = CANDIDATE_DIR
    """Where the candidate lies inside every sandbox (the task's candidate mount)."""
    budget: str = ""
    """What the role's prompt says of its budget: what the run has left and the role's share (twin's text)."""
    share: ShareGauge | None = None
    """The role's share of this round's budget, watched between its model calls (None: none)."""


class Role(Protocol):
    """One role of the loop: built over a model and a workbench, run once per round."""

    role: str
    """The role's name in trajectories and prompts ('diagnoser', 'migrator', 'verifier')."""

    def run(self, brief: RoundBrief) -> AgentOutcome:
        """Work one round from `brief`; return how the agent ended and what it submitted."""
        ...
