from __future__ import annotations

import pytest

from harness.candidate_repo import CandidateRepo, CandidateRepoError


@pytest.fixture
def repo(tmp_path):
    repo = CandidateRepo(tmp_path / "candidate", tmp_path / "candidate.git")
    repo.init()
    return repo


def test_rounds_are_committed_tagged_and_exported_without_git(repo, tmp_path):
    (repo.work_tree / "model.py").write_text("A = 1\n")
    first = repo.commit_round(1, "first")
    (repo.work_tree / "model.py").write_text("A = 2\n")
    repo.commit_round(2, "second")
    assert repo.rounds() == [0, 1, 2]
    assert first != repo.head()
    out = repo.export(1, tmp_path / "snap")
    assert (out / "model.py").read_text() == "A = 1\n"
    assert not (out / ".git").exists()


def test_changed_compares_round_trees(repo):
    (repo.work_tree / "a.py").write_text("x")
    repo.commit_round(1, "a")
    repo.commit_round(2, "nothing new")
    assert repo.changed(0, 1)
    assert not repo.changed(1, 2)


def test_reset_discards_a_half_done_step(repo):
    (repo.work_tree / "kept.py").write_text("kept")
    repo.commit_round(1, "kept")
    (repo.work_tree / "kept.py").write_text("half-written")
    (repo.work_tree / "stray.py").write_text("stray")
    repo.reset_to(1)
    assert (repo.work_tree / "kept.py").read_text() == "kept"
    assert not (repo.work_tree / "stray.py").exists()


def test_history_lives_outside_the_writable_tree(repo):
    """Deleting /app/.git (as a Migrator could) does not touch the round history."""
    (repo.work_tree / ".git").unlink()
    (repo.work_tree / "f.py").write_text("f")
    repo.commit_round(1, "after")
    assert repo.rounds() == [0, 1]
    assert "f.py" in repo.files()


def test_unknown_round_is_a_clear_error(repo, tmp_path):
    with pytest.raises(CandidateRepoError, match="git archive failed"):
        repo.export(7, tmp_path / "x")
