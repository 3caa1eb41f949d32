"""Paths of the probe tests' fixtures (a tiny task, candidates, probe files)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny"
CANDIDATES = FIXTURES / "candidates"
BARE_NAMES = FIXTURES / "bare-names"
"""A task whose candidate (`solution/app/jax_repo`) imports its siblings by bare name."""
