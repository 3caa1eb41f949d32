"""`twin probe`: run differential probes and candidate-side checks on a candidate."""

from __future__ import annotations

from harness.errors import NotImplementedYet


def probe_command() -> None:
    """Probe a candidate against the task's original and print what is established."""
    raise NotImplementedYet("twin probe is not implemented yet")
