"""Scaffolds by name: what drives the model through a run (`twin migrate --scaffold NAME`).

Every scaffold is built from the same `Session` (model, budget, trajectory,
sandboxes, boundary, candidate repository) and leaves the same things behind (a
candidate commit per round, a final round, a stop reason), so all of them are
graded and reported alike. Implementations are imported only when chosen.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol, get_args

from harness.ground.errors import TwinError
from harness.run import Scaffold as ScaffoldName

if TYPE_CHECKING:
    from harness.progress import Progress
    from harness.session import Session


class Scaffold(Protocol):
    """Runs (or resumes) one run's rounds; built as `Scaffold(session, progress)`.

    `run()` commits each round's candidate, sets the state's final round, stop reason
    and status, and saves it. A budget running out ends it cleanly; infrastructure
    failures and `ModelStopped` propagate to the caller.
    """

    def run(self) -> None: ...


SCAFFOLDS: dict[str, str] = {
    "twin": "harness.loop:TwinLoop",
    "base": "harness.base_scaffold:BaseScaffold",
    "mini-swe-agent": "harness.mini_swe:MiniSweAgentScaffold",
}
"""Name -> 'module:class'. The names are those `RunConfig.scaffold` accepts."""

assert set(SCAFFOLDS) == set(get_args(ScaffoldName)), "SCAFFOLDS and harness.run.Scaffold disagree"


def check_scaffold(name: str) -> str:
    """`name` if it is a known scaffold.

    Raises:
        TwinError: unknown name (the message lists the known ones).
    """
    if name not in SCAFFOLDS:
        raise TwinError(f"unknown scaffold {name!r}: choose {', '.join(SCAFFOLDS)}")
    return name


def make_scaffold(name: str, session: Session, progress: Progress) -> Scaffold:
    """Import and build the scaffold called `name`."""
    module, cls = SCAFFOLDS[check_scaffold(name)].split(":")
    return getattr(importlib.import_module(module), cls)(session, progress)
