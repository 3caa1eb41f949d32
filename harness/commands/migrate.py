"""`twin migrate`: run the diagnose-migrate-verify loop (or the base scaffold) on a task."""

from __future__ import annotations

from harness.errors import NotImplementedYet


def migrate_command() -> None:
    """Migrate a task's source repository with a model, then grade each round."""
    raise NotImplementedYet("twin migrate is not implemented yet")
