"""Paths of the probe tests' fixtures (a tiny task, candidates, probe files)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny"
CANDIDATES = FIXTURES / "candidates"
