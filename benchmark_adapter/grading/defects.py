"""Seeded defects: small realistic bugs applied to a task's oracle candidate.

A bundled grader (and the probe suite) proves its teeth by catching them. The
defect lists live in twin's own test tree (`tests/benchmark_adapter/defects/<task>.py`,
each exporting `DEFECTS: list[Defect]`), never in the tasks, so no role can see them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel, Field

from ground.errors import TwinError


class DefectError(TwinError):
    """A defect no longer applies to the oracle (its `old` text is missing or ambiguous)."""


class Defect(BaseModel):
    """One seeded bug: replace `old` by `new` once in `file` of the oracle candidate."""

    name: str = Field(description="Short identifier, e.g. 'rmsnorm-eps'.")
    file: str = Field(description="Path relative to the oracle candidate root (solution/app).")
    old: str = Field(description="Exact text that must occur exactly once in the file.")
    new: str = Field(description="Replacement text.")
    component: str = Field(
        description="The original's component the bug lives in (module path or dotted name, e.g. "
        "'model.RMSNorm'), used to score divergence localization. Where the candidate moved the "
        "work into a helper of its own, name the original's component that does that work "
        "(clipping the candidate does in its optimizer is the original's training loop)."
    )
    description: str = Field(default="", description="What goes wrong, in one sentence.")


def apply_defect(oracle_dir: Path, defect: Defect, dest: Path) -> Path:
    """Copy the oracle candidate to `dest` and apply one defect there.

    Returns:
        `dest`, holding the defective candidate.

    Raises:
        DefectError: `defect.old` does not occur exactly once in `defect.file`.
    """
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(oracle_dir, dest, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    target = dest / defect.file
    if not target.is_file():
        raise DefectError(f"defect {defect.name}: {defect.file} not in the oracle candidate")
    text = target.read_text()
    count = text.count(defect.old)
    if count != 1:
        raise DefectError(f"defect {defect.name}: expected text found {count} times in {defect.file}")
    target.write_text(text.replace(defect.old, defect.new))
    return dest
