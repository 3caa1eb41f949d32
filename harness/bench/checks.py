"""Post-run checks of a bench: the same built-in candidate-side checks on every scaffold's final candidate."""

from __future__ import annotations

from pathlib import Path

from harness.run.directory import RunDir
from task_model.model import Task


def post_run_failures(task: Task, run_dir: Path, sandbox: str) -> list[dict]:
    """Run the same built-in checks on every scaffold's final candidate (after the run).

    The twin loop's own evidence cannot be compared with a base scaffold that has none,
    so the failure taxonomy of a bench comes from these checks, identical for both.
    """
    import tempfile

    from harness.run.candidate_repo import CandidateRepo
    from probes.suite import builtin_checks, run_suite

    run = RunDir(run_dir)
    state = run.load_state()
    if state.final_round is None:
        return []
    repo = CandidateRepo(run.candidate, run.candidate_git)
    with tempfile.TemporaryDirectory(prefix="twin-post-") as tmp:
        snapshot = repo.export(state.final_round, Path(tmp) / "candidate")
        with run_suite(task, snapshot, builtin_checks(task), sandbox_kind=sandbox) as suite:
            results = suite.results
    return [
        {"id": r.property.id, "kind": r.property.kind, "level": r.property.level}
        for r in results
        if r.outcome.value == "violated"
    ]
