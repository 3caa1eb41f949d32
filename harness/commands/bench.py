"""`twin bench` and `twin report`: compare scaffolds and rounds over tasks, models and seeds."""

from __future__ import annotations

from harness.errors import NotImplementedYet


def bench_command() -> None:
    """Run trials over tasks x models x scaffolds x seeds and grade every round."""
    raise NotImplementedYet("twin bench is not implemented yet")


def report_command() -> None:
    """Write a markdown report with plots for a bench."""
    raise NotImplementedYet("twin report is not implemented yet")
