"""`twin models`: what model is configured and which provider keys are present."""

from __future__ import annotations

from harness.errors import NotImplementedYet


def models_command() -> None:
    """Show the configured model and which API keys are set (never their values)."""
    raise NotImplementedYet("twin models is not implemented yet")
