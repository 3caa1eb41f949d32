"""A candidate that tries to shape its committed and exported snapshot: links out, ignore lists.

Each round's commit copies the work tree (`copy_tree`) and each export extracts the
round's archive; the export is what the grader and `runs/<id>/final/` get. A link in
the candidate must resolve inside the snapshot however it is followed, and a
`.gitignore` the agent wrote must not leave files out of what is committed and graded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ground.agent_tree import copy_tree
from harness.run.candidate_repo import CandidateRepo


@pytest.fixture
def repo(tmp_path):
    run = tmp_path / "run"
    repo = CandidateRepo(run / "candidate", run / "candidate.git", audit_log=tmp_path / "audit.log")
    repo.init()
    (run / "secret.txt").write_text("HOST\n")
    return repo


def plant_links(tree: Path) -> None:
    """`sub/l -> ..` passes any lexical check; `m -> sub/l/..` then leads above the tree."""
    (tree / "sub").mkdir()
    (tree / "a.py").write_text("x = 1\n")
    os.symlink("..", tree / "sub" / "l")
    os.symlink("sub/l/..", tree / "m")
    os.symlink("l/..", tree / "sub" / "n")
    os.symlink("../secret.txt", tree / "out")
    os.symlink("sub/l", tree / "top")  # the root itself: inside


def links_out(root: Path) -> list[str]:
    """Links under `root` that resolve (through the kernel) outside it."""
    bad = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                real = Path(os.path.realpath(path))
                if real != root and root not in real.parents:
                    bad.append(str(path.relative_to(root)))
    return bad


def test_copy_tree_keeps_no_link_that_leads_out_through_another_link(tmp_path):
    (tmp_path / "tree").mkdir()
    plant_links(tmp_path / "tree")
    report = copy_tree(tmp_path / "tree", tmp_path / "copy")
    assert links_out(tmp_path / "copy") == []
    assert {"m", "sub/n", "out"} <= set(report.refused), report.refused
    assert os.readlink(tmp_path / "copy" / "top") == "sub/l"


def test_a_link_chain_reaches_neither_the_round_commit_nor_the_graded_export(repo, tmp_path):
    plant_links(repo.work_tree)
    repo.commit_round(1, "links")
    committed = repo._git("ls-tree", "-r", "--name-only", "round-1").split()
    assert "m" not in committed and "sub/n" not in committed and "out" not in committed
    final = repo.export(1, tmp_path / "run" / "final")
    assert links_out(final) == []
    assert not os.path.lexists(final / "m") and (final / "a.py").is_file()
    reasons = [json.loads(line)["reason"] for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert any("m (symbolic link through another link" in r for r in reasons), reasons


def test_an_export_of_a_round_committed_with_a_link_chain_keeps_no_link_out(repo, tmp_path):
    """A round committed before links were judged through the tree (or by another tool)."""
    repo.stage.mkdir()
    plant_links(repo.stage)
    repo._git("add", "--all", "--force", ".")
    repo._git("commit", "-q", "-m", "round 1: chain")
    repo._git("tag", "-f", "round-1")
    final = repo.export(1, tmp_path / "run" / "final")
    assert links_out(final) == []
    assert not os.path.lexists(final / "m") and not os.path.lexists(final / "out")
    assert os.readlink(final / "sub" / "l") == ".." and (final / "a.py").is_file()
    reason = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])["reason"]
    assert "entries not exported" in reason and "m (" in reason


def test_a_candidate_gitignore_drops_nothing_from_the_commit_or_the_export(repo, tmp_path):
    tree = repo.work_tree
    (tree / ".gitignore").write_text("weights.npz\n*.log\nbuild/\n")
    (tree / "weights.npz").write_bytes(b"\x93NUMPY")
    (tree / "train.log").write_text("log\n")
    (tree / "build").mkdir()
    (tree / "build" / "model.py").write_text("M = 1\n")
    (tree / "pkg").mkdir()
    (tree / "pkg" / ".gitignore").write_text("*\n")
    (tree / "pkg" / "ops.py").write_text("def f():\n    return 1\n")
    repo.commit_round(1, "ignored files")
    wanted = {".gitignore", "weights.npz", "train.log", "build/model.py", "pkg/.gitignore", "pkg/ops.py"}
    committed = set(repo._git("ls-tree", "-r", "--name-only", "round-1").split())
    assert wanted <= committed, wanted - committed
    graded = repo.export(1, tmp_path / "graded")
    assert all((graded / name).is_file() for name in wanted)
    (tree / "pkg" / "ops.py").unlink()
    repo.commit_round(2, "removed one")
    assert "pkg/ops.py" not in repo._git("ls-tree", "-r", "--name-only", "round-2").split()
