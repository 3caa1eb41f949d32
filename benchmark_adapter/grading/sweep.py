"""Oracle and seeded-defect sweep: proof that a task's grader solves, and has teeth.

The oracle (`solution/app/`) is graded first; then each seeded defect is applied to a
copy of it and graded the same way. A defect is *caught* when its reward is below the
oracle's; a check is *tripped* when some defect scores it below the oracle's score on
that check. Works for any task whose grader reports per-check scores in `reward.json`
and that has a defect list (`tests/benchmark_adapter/defects/<task>.py`, `DEFECTS`).
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from benchmark_adapter.grading.defects import Defect, apply_defect
from benchmark_adapter.grading.grader import Grade, GraderError, oracle_copy, run_grader
from ground.agent_tree import discard_tree
from task_model.model import Task

SCHEMA_VERSION = 1
TRIP_MARGIN = 1e-6  # below the oracle by more than float noise of identical deterministic runs

GradeFn = Callable[[Task, Path], Grade]


class DefectOutcome(BaseModel):
    """What the grader said about one seeded defect."""

    name: str = Field(description="Defect name.")
    component: str = Field(description="Source component the bug lives in.")
    reward: float = Field(description="Reward of the defective candidate.")
    caught: bool = Field(description="Reward strictly below the oracle's.")
    tripped: list[str] = Field(
        default_factory=list, description="Checks scored below the oracle's score."
    )
    error: str | None = Field(default=None, description="Grader error, if it gave no reward.")


class SweepReport(BaseModel):
    """Oracle solvability and seeded-defect coverage of one task's grader."""

    schema_version: int = Field(default=SCHEMA_VERSION, description="Record format version.")
    task: str = Field(description="Task name.")
    oracle_reward: float = Field(description="Reward of the oracle solution.")
    oracle_checks: dict[str, float] = Field(
        default_factory=dict, description="Oracle score per check."
    )
    defects: list[DefectOutcome] = Field(
        default_factory=list, description="One outcome per defect."
    )

    @property
    def caught_fraction(self) -> float:
        """Fraction of defects whose reward is below the oracle's."""
        return sum(d.caught for d in self.defects) / len(self.defects) if self.defects else 0.0

    @property
    def tripped_checks(self) -> set[str]:
        return {c for d in self.defects for c in d.tripped}

    @property
    def untripped_checks(self) -> list[str]:
        """Checks no defect tripped."""
        return sorted(set(self.oracle_checks) - self.tripped_checks)

    @property
    def tripped_fraction(self) -> float:
        """Fraction of the grader's checks tripped by at least one defect."""
        if not self.oracle_checks:
            return 0.0
        return len(self.tripped_checks & set(self.oracle_checks)) / len(self.oracle_checks)


def load_defects(path: Path) -> list[Defect]:
    """Import `DEFECTS` from a defect module given by path.

    Raises:
        GraderError: the file is missing or has no `DEFECTS` list of `Defect`.
    """
    path = Path(path)
    if not path.is_file():
        raise GraderError(f"defect list not found: {path}")
    spec = importlib.util.spec_from_file_location(f"_defects_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    defects = getattr(module, "DEFECTS", None)
    if not isinstance(defects, list) or not all(isinstance(d, Defect) for d in defects):
        raise GraderError(f"{path} defines no DEFECTS: list[Defect]")
    return defects


def check_scores(grade: Grade) -> dict[str, float]:
    """Per-check scores of a grade (`{id: score}`); non-numeric entries are skipped."""
    scores = {}
    for name, check in grade.checks.items():
        score = check.get("score") if isinstance(check, dict) else check
        if isinstance(score, (int, float)):
            scores[name] = float(score)
    return scores


def run_sweep(
    task: Task,
    defects: list[Defect],
    *,
    sandbox: str = "auto",
    jobs: int = 1,
    grade_fn: GradeFn | None = None,
    oracle_grade: Grade | None = None,
) -> SweepReport:
    """Grade the oracle, then every defect applied to a copy of it.

    Args:
        task: the task (must ship `solution/app/`).
        defects: the seeded defects to apply.
        sandbox: sandbox kind for the grader (when `grade_fn` is not given).
        jobs: defects graded at once.
        grade_fn: `(task, candidate) -> Grade`; defaults to `run_grader` in `sandbox`.
        oracle_grade: an already computed grade of the oracle (skips grading it again).

    Raises:
        GraderError: no oracle; benchmark_adapter.grading.defects.DefectError: a defect no longer applies.
    """
    grade = grade_fn or (lambda t, c: run_grader(t, c, sandbox=sandbox))
    with oracle_copy(task) as oracle_dir:
        oracle = oracle_grade or grade(task, oracle_dir)
        oracle_scores = check_scores(oracle)
        with tempfile.TemporaryDirectory(prefix="twin-sweep-") as tmp:
            # apply every defect first: a stale one fails before any grading time is spent
            candidates = [apply_defect(oracle_dir, d, Path(tmp) / d.name / "app") for d in defects]

            def one(pair: tuple[Defect, Path]) -> DefectOutcome:
                defect, candidate = pair
                result = grade(task, candidate)
                scores = check_scores(result)
                tripped = [
                    name
                    for name, ref in oracle_scores.items()
                    if scores.get(name, 0.0) < ref - TRIP_MARGIN
                ]
                discard_tree(candidate.parent)
                return DefectOutcome(
                    name=defect.name,
                    component=defect.component,
                    reward=result.reward,
                    caught=result.reward < oracle.reward - TRIP_MARGIN,
                    tripped=tripped,
                    error=result.error,
                )

            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                outcomes = list(pool.map(one, zip(defects, candidates, strict=True)))
    return SweepReport(
        task=task.name, oracle_reward=oracle.reward, oracle_checks=oracle_scores, defects=outcomes
    )
