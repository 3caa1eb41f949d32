"""One format for every measured number a reader sees: prompts, tool results, `twin probe`, `twin evidence`.

A measurement is rendered to three significant digits: a similarity score, and a
distance with the tolerance it is held against (and the noise floor the tolerance
comes from) alike, so that a reader can see the comparison that decided an output
(`distance 1.52e-05 > tolerance 1.49e-05`, never `1.5e-05 > 1e-05`). Every
rendered measurement contains a decimal point or an exponent (`1.0`, `0.546`,
`7.25e-09`), so `canonical()` can tell it from a count or a round number and mask
it: two renderings of the same evidence taken on two machines (whose float32 noise
differs in its last digits) have the same canonical text. A candidate commit,
rendered as `commit <10 hex digits>`, is masked too: it hashes the time it was made."""

from __future__ import annotations

import math
import re

SCORE_DIGITS = 3
MEASURE_DIGITS = 3
"""Significant digits of a distance, a tolerance and a noise floor: one format for what is compared."""

MEASURED = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+|(?<![\w.])(?:nan|-?inf)\b")
"""A measured number as rendered here (decimal point or exponent; nan, inf)."""

COMMIT = re.compile(r"\bcommit [0-9a-f]{10}\b")
"""A candidate commit as rendered (`commit(sha)`)."""

MASK = "#"
MEASURED_WIDTH = 8
"""The most characters one rendered measurement takes (e.g. `1.23e-05`): budgets count every
measurement at this width, so what fits in a budget does not depend on the digits."""


def significant(value: float, digits: int) -> str:
    """`value` to `digits` significant digits, always with a decimal point or an exponent."""
    value = float(value)
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    text = f"{value:.{digits}g}"
    return text if ("." in text or "e" in text) else text + ".0"


def score(value: float) -> str:
    """A similarity score in [0, 1]."""
    return significant(value, SCORE_DIGITS)


def distance(value: float) -> str:
    """A distance, 1 - score: what is held against a tolerance."""
    return significant(value, MEASURE_DIGITS)


def tolerance(value: float) -> str:
    """A tolerance or a band: what a distance is held against, in the distance's format."""
    return significant(value, MEASURE_DIGITS)


def noise(value: float) -> str:
    """A noise floor: the reference's own disagreement, which the tolerance is ten times."""
    return significant(value, MEASURE_DIGITS)


def reward(value: float) -> str:
    """A grader's reward to four decimals, saying by how much it falls short of 1 when those hide it.

    `0.99998777` reads `1.0000 (1 - 1.2e-05)`: a repair that moves a reward from there to
    `0.99999995` must not read as no change at all.
    """
    return short_of_one(f"{value:.4f}", value)


def short_of_one(text: str, value: float) -> str:
    """`text` (`value` rounded), saying by how much `value` falls short of 1 where it reads 1.

    A score of `0.99995` reads `1.0 (1 - 5e-05)` on a terminal: a violated property shown
    with a perfect-looking score would read as a contradiction.
    """
    if value < 1.0 and float(text) == 1.0:
        return f"{text} (1 - {significant(1.0 - value, 2)})"
    return text


def commit(sha: str) -> str:
    """A candidate commit, as `commit 0123456789`."""
    return f"commit {sha[:10]}"


def canonical(text: str) -> str:
    """`text` with every measured number and commit masked: what two machines agree on."""
    return MEASURED.sub(MASK, COMMIT.sub("commit " + MASK, text))


def budget_length(text: str) -> int:
    """The length `text` counts for in a budget: every measurement at `MEASURED_WIDTH`."""
    masked, measurements = MEASURED.subn(MASK, text)
    return len(masked) + measurements * (MEASURED_WIDTH - len(MASK))


def clip_words(text: str, limit: int) -> str:
    """`text` on one line, shortened to about `limit` budget characters at a word boundary.

    Never cuts inside a word or a number; the cut is decided on the budget length, so
    it falls at the same word whatever the digits of the measurements in it.
    """
    words = text.split()
    joined = " ".join(words)
    # A measurement never spans a space, so the whole line costs what its words and spaces cost:
    # a line that fits is kept whole without measuring word by word.
    if budget_length(joined) <= limit:
        return joined
    kept: list[str] = []
    used = 0
    for word in words:
        cost = budget_length(word) + (1 if kept else 0)
        if used + cost > limit and kept:
            return " ".join(kept) + " …"
        kept.append(word)
        used += cost
    return " ".join(kept)
