from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile

import pytest

from harness.run.candidate_repo import CandidateRepo, CandidateRepoError, _extract
from tests.fakes.trees import deep_chain


@pytest.fixture(params=[True, False], ids=["tarfile-filters", "python-3.11.2"])
def filters(request, monkeypatch):
    """Exports with tarfile's extraction filters and with the rules twin applies where they are missing."""
    if request.param and not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python's tarfile has no extraction filters (before 3.11.4)")
    monkeypatch.setattr("harness.run.candidate_repo._FILTERS", request.param)
    return request.param


@pytest.fixture
def repo(tmp_path):
    repo = CandidateRepo(tmp_path / "candidate", tmp_path / "candidate.git")
    repo.init()
    return repo


def test_rounds_are_committed_tagged_and_exported_without_git(repo, tmp_path, filters):
    (repo.work_tree / "model.py").write_text("A = 1\n")
    (repo.work_tree / "pkg" / "sub").mkdir(parents=True)
    (repo.work_tree / "pkg" / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (repo.work_tree / "pkg" / "sub" / "run.sh").chmod(0o775)
    first = repo.commit_round(1, "first")
    (repo.work_tree / "model.py").write_text("A = 2\n")
    repo.commit_round(2, "second")
    assert repo.rounds() == [0, 1, 2]
    assert first != repo.head()
    out = repo.export(1, tmp_path / "snap")
    assert (out / "model.py").read_text() == "A = 1\n"
    assert not (out / ".git").exists()
    modes = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*")}
    assert modes == {"model.py": 0o644, "pkg": 0o755, "pkg/sub": 0o755, "pkg/sub/run.sh": 0o755}


def test_changed_compares_round_trees(repo):
    (repo.work_tree / "a.py").write_text("x")
    first = repo.commit_round(1, "a")
    second = repo.commit_round(2, "nothing new")
    assert repo.changed(0, 1)
    assert not repo.changed(1, 2)
    assert second == first  # a round that changed nothing is no new candidate commit
    assert repo.rounds() == [0, 1, 2]


def test_reset_discards_a_half_done_step(repo):
    (repo.work_tree / "kept.py").write_text("kept")
    repo.commit_round(1, "kept")
    (repo.work_tree / "kept.py").write_text("half-written")
    (repo.work_tree / "stray.py").write_text("stray")
    repo.reset_to(1)
    assert (repo.work_tree / "kept.py").read_text() == "kept"
    assert not (repo.work_tree / "stray.py").exists()


def test_history_lives_outside_the_writable_tree(repo):
    """/app is a plain directory: no .git entry names the host's git directory."""
    assert not (repo.work_tree / ".git").exists()
    (repo.work_tree / "f.py").write_text("f")
    repo.commit_round(1, "after")
    assert repo.rounds() == [0, 1]
    assert "f.py" in repo.files()


def test_unknown_round_is_a_clear_error(repo, tmp_path):
    with pytest.raises(CandidateRepoError, match="git archive failed"):
        repo.export(7, tmp_path / "x")


# ---- what the Migrator wrote is data to git, never configuration (attacks) -----------------------
def _git(*args, cwd):
    subprocess.run(
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=cwd, check=True, capture_output=True
    )


def _nested_repo(path, marker):
    """A repository inside the candidate whose configuration runs a command when git looks at it."""
    path.mkdir(parents=True)
    _git("init", "-q", ".", cwd=path)
    (path / "f.txt").write_text("x")
    _git("add", "f.txt", cwd=path)
    _git("commit", "-qm", "x", cwd=path)
    for key in ("core.fsmonitor", "diff.external", "core.pager", "core.hooksPath"):
        _git("config", key, f"touch {marker}; false", cwd=path)
    (path / ".git" / "hooks" / "pre-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (path / ".git" / "hooks" / "pre-commit").chmod(0o755)
    (path / "f.txt").write_text("dirty")


def test_nested_repository_config_never_runs_on_commit_diff_reset_or_export(repo, tmp_path):
    marker = tmp_path / "PWNED"
    _nested_repo(repo.work_tree / "sub", marker)
    (repo.work_tree / ".git").mkdir()  # the candidate's own .git, as a Migrator could write it
    (repo.work_tree / ".git" / "config").write_text(f"[core]\n\tfsmonitor = touch {marker}; false\n")
    (repo.work_tree / ".gitattributes").write_text("* filter=evil\n")
    (repo.work_tree / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = /etc\n')
    for round in (1, 2, 3):
        (repo.work_tree / "sub" / "f.txt").write_text(f"round {round}")
        repo.commit_round(round, "m")
        repo.changed(round - 1, round)
        repo.diff(round - 1, round)
        repo.files()
    repo.reset_to(2)
    out = repo.export(3, tmp_path / "snap")
    assert not marker.exists(), "git ran a command from a configuration the candidate wrote"
    assert (out / "sub" / "f.txt").read_text() == "round 3", "the nested files are committed as plain files"
    for name in (".git", "sub/.git", ".gitattributes", ".gitmodules"):
        assert not (out / name).exists(), name


def test_git_ignores_the_hosts_global_and_system_configuration(repo, tmp_path, monkeypatch):
    marker = tmp_path / "PWNED-global"
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = touch {marker}; false\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    (repo.work_tree / "a.py").write_text("a")
    repo.commit_round(1, "m")
    (repo.work_tree / "a.py").write_text("b")
    repo.commit_round(2, "m")
    assert not marker.exists()


def test_links_out_special_files_and_setuid_bits_never_reach_a_snapshot(tmp_path, filters):
    audit = tmp_path / "audit.log"
    repo = CandidateRepo(tmp_path / "candidate", tmp_path / "candidate.git", audit_log=audit)
    repo.init()
    tree = repo.work_tree
    (tree / "ok.py").write_text("ok")
    (tree / "inside").symlink_to("ok.py")
    (tree / "abs").symlink_to("/etc/passwd")
    (tree / "up").symlink_to("../../../../etc/passwd")
    os.mkfifo(tree / "fifo")
    (tree / "suid.sh").write_text("#!/bin/sh\n")
    (tree / "suid.sh").chmod(0o4755)
    repo.commit_round(1, "m")  # a FIFO must not hang the copy
    out = repo.export(1, tmp_path / "snap")
    assert sorted(p.name for p in out.iterdir()) == ["inside", "ok.py", "suid.sh"]
    assert os.readlink(out / "inside") == "ok.py"
    assert not (out / "suid.sh").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    line = json.loads(audit.read_text().splitlines()[-1])
    assert line["boundary"] == "snapshot" and "abs" in line["reason"] and "fifo" in line["reason"]


def test_a_sparse_giant_is_refused_not_expanded(repo, tmp_path):
    with open(repo.work_tree / "sparse.bin", "wb") as fh:
        fh.truncate(1 << 30)
    (repo.work_tree / "small.py").write_text("s")
    repo.commit_round(1, "m")
    out = repo.export(1, tmp_path / "snap")
    assert not (out / "sparse.bin").exists()
    assert (out / "small.py").exists()


def test_a_thousand_deep_chain_commits_resets_and_lists_without_recursion(repo, tmp_path):
    deep_chain(repo.work_tree, 1000)
    (repo.work_tree / "top.py").write_text("t")
    repo.commit_round(1, "m")
    assert "top.py" in repo.files()
    assert any("listing stopped" in f for f in repo.files())
    repo.reset_to(1)
    assert (repo.work_tree / "top.py").exists()
    out = repo.export(1, tmp_path / "snap")
    assert (out / "top.py").exists()


def test_diff_shows_what_a_round_changed(repo):
    (repo.work_tree / "a.py").write_text("x = 1\n")
    repo.commit_round(1, "m")
    (repo.work_tree / "a.py").write_text("x = 2\n")
    repo.commit_round(2, "m")
    text = repo.diff(1, 2)
    assert "a.py" in text and "-x = 1" in text and "+x = 2" in text


def test_a_work_tree_whose_filesystem_lost_writes_is_never_committed(repo):
    from ground.sandbox import SandboxError

    (repo.work_tree / "model.py").write_text("A = 1\n")
    checked = []
    repo.check_written = lambda: checked.append(True)
    first = repo.commit_round(1, "first")
    assert checked == [True]

    def lost():
        raise SandboxError("the capped filesystem of candidate lost writes (Input/output error)")

    repo.check_written = lost
    (repo.work_tree / "model.py").write_bytes(b"\0" * 6)  # what a lost write reads back as
    with pytest.raises(SandboxError, match="lost writes"):
        repo.commit_round(2, "zeroed")
    assert repo.rounds() == [0, 1] and repo.head() == first


def test_an_export_that_stops_early_reports_its_own_error_not_gits_sigpipe(repo, tmp_path, monkeypatch):
    (repo.work_tree / "a.bin").write_bytes(os.urandom(1 << 20))  # more than a pipe holds
    (repo.work_tree / "b.py").write_text("B = 1\n")
    repo.commit_round(1, "first")

    def fails(self, member, *args, **kwargs):
        raise tarfile.ReadError("unexpected end of data")

    monkeypatch.setattr(tarfile.TarFile, "extract", fails)
    with pytest.raises(CandidateRepoError, match="unreadable: unexpected end of data"):
        repo.export(1, tmp_path / "snap")


@pytest.mark.parametrize(
    "name,kind", [("../out", tarfile.REGTYPE), ("/abs", tarfile.REGTYPE), ("fifo", tarfile.FIFOTYPE)]
)
def test_without_tarfile_filters_members_out_of_place_or_special_are_refused(tmp_path, monkeypatch, name, kind):
    monkeypatch.setattr("harness.run.candidate_repo._FILTERS", False)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        member = tarfile.TarInfo(name)
        member.type = kind
        tar.addfile(member, io.BytesIO(b""))
    buffer.seek(0)
    dest = tmp_path / "dest"
    dest.mkdir()
    with tarfile.open(fileobj=buffer) as tar, pytest.raises(tarfile.ExtractError):
        _extract(tar, tar.getmembers()[0], dest)
    assert list(tmp_path.rglob("*")) == [dest]
