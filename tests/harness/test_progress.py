"""The live line says when its token count is twin's own estimate."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from harness.models.budget import Spent
from harness.run.progress import Progress, RunView


@pytest.mark.parametrize(("estimated", "shown"), [(True, "tokens=~12,345 (estimated)"), (False, "tokens=12,345 ")])
def test_the_plain_line_marks_estimated_tokens(estimated, shown):
    out = io.StringIO()
    progress = Progress(RunView("r", "twin", "inbox", 2), Console(file=out, width=200), live=False)
    progress.step(3, 12_345, 0.0, estimated=estimated)
    progress.message("round 1 done")
    assert shown in out.getvalue()


@pytest.mark.parametrize(
    ("spent", "text"),
    [
        (Spent(tokens_in=1000, tokens_out=200, tokens_estimated=1200), "1,200 tokens (all estimated)"),
        (Spent(tokens_in=1000, tokens_out=200, tokens_estimated=300), "1,200 tokens (300 estimated), 0% of prompt"),
        (Spent(tokens_in=1000, tokens_out=200, tokens_cached=750), "1,200 tokens, 75% of prompt tokens cached"),
        (Spent(), "0 tokens"),
    ],
)
def test_the_summary_says_which_tokens_are_estimated_and_which_were_cached(spent, text):
    assert spent.tokens_text().startswith(text)
    if spent.tokens and spent.tokens_estimated >= spent.tokens:  # no reply said what a cache served
        assert "cached" not in spent.tokens_text()
