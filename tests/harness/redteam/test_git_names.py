"""One file in the candidate never ends a run unrecorded.

git refuses `.git` in any case and the forms NTFS and HFS+ read as `.git`; one such
name in `/app` made `git add --all` fail the round's commit, and `twin migrate`
exited with the state still `running`, no crash.txt and round 1 ungraded. Such names
are now left out of the snapshot and audited, and any failure while committing,
exporting or grading a round is a recorded failure: state `failed`, `crash.txt`, the
committed rounds graded, a resume point.
"""

from __future__ import annotations

import json

import pytest

from harness.run import candidate_repo, finish
from harness.run.candidate_repo import CandidateRepo, CandidateRepoError, git_refused
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.conftest import requires_bwrap
from tests.harness import loop_scripts as plans

REFUSED = [".GIT", ".Git", ".git.", ".git ", "git~1", "GIT~1", ".git::$INDEX_ALLOCATION", ".g\u200cit", "\ufeff.git"]


def repo_with(tmp_path, entries: dict[str, str]) -> CandidateRepo:
    work = tmp_path / "candidate"
    for rel, text in {"ok.py": "x = 1\n", **entries}.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    repo = CandidateRepo(work, tmp_path / "candidate.git", audit_log=tmp_path / "audit.log")
    repo.init()
    return repo


def committed_names(repo: CandidateRepo, tmp_path, round: int = 1) -> list[str]:
    out = repo.export(round, tmp_path / f"export-{round}")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


@pytest.mark.parametrize("shape", ["directory", "file", "nested"])
def test_names_git_refuses_are_skipped_and_audited_never_fatal(tmp_path, shape):
    rels = [{"directory": f"{name}/x", "file": name, "nested": f"pkg/{name}/config"}[shape] for name in REFUSED]
    repo = repo_with(tmp_path, {**dict.fromkeys(rels, "[core]\n"), "pkg/__init__.py": ""})
    repo.commit_round(1, "migrator")
    assert committed_names(repo, tmp_path) == ["ok.py", "pkg", "pkg/__init__.py"]
    audit = (tmp_path / "audit.log").read_text()
    assert f"{len(REFUSED)} entries not committed" in audit and "a name git refuses" in audit
    for name in REFUSED:
        assert git_refused(name), name
    for fine in (".gitignore", ".github", "git", ".gitx", "git~2"):
        assert git_refused(fine) is None, fine


def test_git_s_own_refusal_is_the_backstop_for_a_form_twin_does_not_know(tmp_path, monkeypatch):
    monkeypatch.setattr(candidate_repo, "git_refused", lambda name: None)
    repo = repo_with(tmp_path, {".GIT/x": "x", "sub/.Git/y": "y", "sub/a.py": ""})
    repo.commit_round(1, "migrator")
    assert committed_names(repo, tmp_path) == ["ok.py", "sub", "sub/a.py"]
    assert "git refuses the path" in (tmp_path / "audit.log").read_text()


def start(tmp_path, replies) -> RunDir:
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, rounds=2)
    return RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))


@pytest.mark.heavy
@requires_bwrap
def test_a_migrator_writing_dot_git_in_capitals_finishes_and_is_graded(tmp_path):
    replies = plans.twin_fix_in_round_two()
    at = next(i for i, r in enumerate(replies) if '"summary": "wrote calc"' in json.dumps(r))  # round 1's Migrator
    planted = "mkdir -p /app/.GIT /app/calc/.Git && printf '[core]\\n' | tee /app/.GIT/x > /app/calc/.Git/config"
    replies.insert(at, plans.call("bash", command=planted))
    run = start(tmp_path, replies)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert state.status == "finished" and not (run.root / "crash.txt").exists()
    assert [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]] == [0.5, 1.0]
    assert "a name git refuses" in run.audit_log.read_text()


@pytest.mark.heavy
@requires_bwrap
@pytest.mark.parametrize("where", ["commit", "grade"])
def test_a_failure_committing_or_grading_a_round_is_recorded_graded_and_resumable(tmp_path, monkeypatch, where):
    original_commit, original_grade = CandidateRepo.commit_round, finish._grade_round

    def commit_fails_in_round_two(self, round, message):
        if round == 2:
            raise CandidateRepoError("git add failed: error: invalid path 'X'")
        return original_commit(self, round, message)

    def grading_fails_in_round_two(s, rs, previous, progress):
        if rs.round == 2:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a candidate's bytes")
        return original_grade(s, rs, previous, progress)

    if where == "commit":
        monkeypatch.setattr(CandidateRepo, "commit_round", commit_fails_in_round_two)
    else:
        monkeypatch.setattr(finish, "_grade_round", grading_fails_in_round_two)
    run = start(tmp_path, plans.twin_fix_in_round_two())
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert state.status == "failed" and state.stop_reason.startswith("error:")
    assert ("invalid path" if where == "commit" else "UnicodeDecodeError") in (run.root / "crash.txt").read_text()
    rounds = json.loads(run.grades.read_text())["rounds"]
    assert rounds[0]["round"] == 1 and rounds[0]["reward"] == 0.5
    if where == "grade":
        assert rounds[1]["reward"] is None and rounds[1]["error"].startswith("internal error")
    monkeypatch.undo()
    run_migration(RunInputs.read(run), SCAFFOLDS)  # resumed from the last complete step
    assert run.load_state().status == "finished"
    assert [g["round"] for g in json.loads(run.grades.read_text())["rounds"]] == [1, 2]
