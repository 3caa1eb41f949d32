"""Scaffolds by name: what drives the model through a run (`twin migrate --scaffold NAME`).

Every scaffold is built from the same `Session` (model, budget, trajectory,
sandboxes, boundary, candidate repository) and leaves the same things behind (a
candidate commit per round, a final round, a stop reason), so all of them are
graded and reported alike. mini-swe-agent itself is imported only when its scaffold is built.
"""

from __future__ import annotations

from typing import get_args

from ground.errors import TwinError
from harness.run.directory import Scaffold as ScaffoldName
from harness.run.migration import ScaffoldFactory
from harness.scaffolds.base import BaseScaffold
from harness.scaffolds.mini_swe import MiniSweAgentScaffold
from harness.scaffolds.twin.loop import TwinLoop

SCAFFOLDS: dict[str, ScaffoldFactory] = {
    "twin": TwinLoop,
    "base": BaseScaffold,
    "mini-swe-agent": MiniSweAgentScaffold,
}
"""Name -> factory (`harness.run.migration.ScaffoldFactory`). The names are those `RunConfig.scaffold` accepts."""

assert set(SCAFFOLDS) == set(get_args(ScaffoldName)), "SCAFFOLDS and harness.run.directory.Scaffold disagree"


def check_scaffold(name: str) -> str:
    """`name` if it is a known scaffold.

    Raises:
        TwinError: unknown name (the message lists the known ones).
    """
    if name not in SCAFFOLDS:
        raise TwinError(f"unknown scaffold {name!r}: choose {', '.join(SCAFFOLDS)}")
    return name
