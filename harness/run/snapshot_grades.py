"""After the run: grade the snapshots it took (`harness.run.snapshots`), once per distinct tree.

A snapshot whose tree a graded round or an earlier snapshot has already had reuses that
grade (the same tree digest is the same candidate, so the same reward); the rest are
exported from their refs and graded by the task's unchanged grader, in a sandbox of
their own, exactly as a round is. Nothing of this reaches any role: the run is over.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmark_adapter.grading.grader import run_grader
from ground.errors import TwinError
from ground.untrusted_io import write_text_atomic
from harness.run.finish import RunGrades
from harness.run.snapshots import Snapshot, SnapshotGrade, tree_of

Known = dict[str, tuple[float, str, str]]
"""tree digest -> (reward, error, whose grade: 'round 2', 'snapshot 3')."""


def grade_snapshots(session: Any, progress: Any, grades: RunGrades, earlier: RunGrades | None = None) -> RunGrades:
    """Grade every snapshot of the run into `grades.snapshots`; write `grades.json` and return the grades.

    Args:
        grades: the run's round grades, just made: a round's tree is not graded again.
        earlier: the run's grades from before (a resumed run): a snapshot graded then keeps its grade.
    """
    s = session
    known: Known = {}
    for g in grades.rounds:
        if g.reward is not None and g.round in s.repo.rounds():
            known.setdefault(tree_of(s.repo, f"refs/tags/round-{g.round}"), (g.reward, g.error, f"round {g.round}"))
    for old in earlier.snapshots if earlier else []:
        if old.reward is not None:
            known.setdefault(
                old.snapshot.tree, (old.reward, old.error, old.same_as or f"snapshot {old.snapshot.index}")
            )
    result: list[SnapshotGrade] = []
    for snapshot in s.state.snapshots:
        if snapshot.tree in known:
            reward, error, whose = known[snapshot.tree]
            same = "" if whose == f"snapshot {snapshot.index}" else whose
            result.append(SnapshotGrade(snapshot=snapshot, reward=reward, error=error, same_as=same))
            continue
        progress.message(f"grading snapshot {snapshot.index} of {len(s.state.snapshots)} with the task's own grader")
        graded = _grade(s, snapshot)
        result.append(graded)
        if graded.reward is not None:
            known[snapshot.tree] = (graded.reward, graded.error, f"snapshot {snapshot.index}")
    grades = grades.model_copy(update={"snapshots": result})
    write_text_atomic(s.run.grades, grades.model_dump_json(indent=2))
    return grades


def _grade(s: Any, snapshot: Snapshot) -> SnapshotGrade:
    """One snapshot's grade by the task's grader; twin's own failure is a missing reward, never a 0."""
    with tempfile.TemporaryDirectory(prefix="twin-grade-") as tmp:
        try:
            tree = s.repo.export_ref(snapshot.ref, Path(tmp) / "candidate", label=f"snapshot-{snapshot.index}")
            grade = run_grader(s.task, tree, sandbox=s.config.sandbox, audit_log=s.run.audit_log)
        except (TwinError, OSError) as exc:
            return SnapshotGrade(snapshot=snapshot, error=str(exc)[:500])
    return SnapshotGrade(snapshot=snapshot, reward=grade.reward, error=grade.error or "")
