"""Scaffolds by name: what drives the model through a run (`twin migrate --scaffold NAME`).

Every scaffold is built from the same `Session` (model, budget, trajectory,
sandboxes, boundary, candidate repository) and leaves the same things behind (a
candidate commit per round, a final round, a stop reason), so all of them are
graded and reported alike. mini-swe-agent itself is imported only when its scaffold is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, get_args

from harness.ground.errors import TwinError
from harness.run.directory import Scaffold as ScaffoldName
from harness.run.loop import TwinLoop
from harness.run.progress import Progress
from harness.run.session import Session
from harness.scaffolds.base import BaseScaffold
from harness.scaffolds.mini_swe import MiniSweAgentScaffold


class Scaffold(Protocol):
    """Runs (or resumes) one run's rounds.

    `run()` commits each round's candidate, sets the state's final round, stop reason
    and status, and saves it. A budget running out ends it cleanly; infrastructure
    failures and `ModelStopped` propagate to the caller.
    """

    def run(self) -> None: ...


ScaffoldFactory = Callable[[Session, Progress], Scaffold]
"""Builds a scaffold over one run's session, reporting to `progress`."""

SCAFFOLDS: dict[str, ScaffoldFactory] = {
    "twin": TwinLoop,
    "base": BaseScaffold,
    "mini-swe-agent": MiniSweAgentScaffold,
}
"""Name -> factory. The names are those `RunConfig.scaffold` accepts."""

assert set(SCAFFOLDS) == set(get_args(ScaffoldName)), "SCAFFOLDS and harness.run.directory.Scaffold disagree"


def check_scaffold(name: str) -> str:
    """`name` if it is a known scaffold.

    Raises:
        TwinError: unknown name (the message lists the known ones).
    """
    if name not in SCAFFOLDS:
        raise TwinError(f"unknown scaffold {name!r}: choose {', '.join(SCAFFOLDS)}")
    return name


def make_scaffold(name: str, session: Session, progress: Progress) -> Scaffold:
    """Build the scaffold called `name`."""
    return SCAFFOLDS[check_scaffold(name)](session, progress)
