"""A directory laid out as hard links to another's files, copied only where no link can be made."""

from __future__ import annotations

import os
import subprocess

from ground import linked_tree


def _site(base):
    site = base / "site-packages"
    (site / "numpy" / "core").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("x = 1\n")
    (site / "numpy" / "core" / "umath.py").write_text("y = 2\n")
    (site / "numpy" / "core" / "umath.py").chmod(0o664)  # group-writable, as some installs leave it
    (site / "numpy" / "core").chmod(0o775)
    (site / "numpy.pth").symlink_to("numpy/__init__.py")
    return site


def _entries(site):
    return sorted(site.iterdir())


def test_on_one_filesystem_the_files_are_links_and_the_originals_keep_their_modes(tmp_path):
    site, staging = _site(tmp_path), tmp_path / "staging"
    staging.mkdir()
    assert linked_tree.lay_out(_entries(site), staging) == linked_tree.LINKED
    original, linked = site / "numpy" / "core" / "umath.py", staging / "numpy" / "core" / "umath.py"
    assert os.stat(original).st_ino == os.stat(linked).st_ino  # the same file: no byte copied
    assert original.stat().st_mode & 0o777 == 0o664  # the environment's own file is not changed
    assert (staging / "numpy" / "core").stat().st_mode & 0o777 == 0o755  # a directory of twin's: no group write
    assert (site / "numpy" / "core").stat().st_mode & 0o777 == 0o775
    assert os.path.islink(staging / "numpy.pth") and (staging / "numpy.pth").read_text() == "x = 1\n"


def test_where_no_link_can_be_made_it_is_copied_without_group_or_other_write(tmp_path, monkeypatch):
    site, staging = _site(tmp_path), tmp_path / "staging"
    staging.mkdir()
    real_run = subprocess.run

    def refuse_links(command, **kwargs):  # fs.protected_hardlinks: a link refused half way
        if command[:2] == ["cp", "-al"]:
            real_run(["cp", "-al", "--", str(site / "numpy"), command[-1]], check=True)
            return subprocess.CompletedProcess(command, 1, b"", b"cp: cannot create hard link: Operation not permitted")
        return real_run(command, **kwargs)

    monkeypatch.setattr(linked_tree.subprocess, "run", refuse_links)
    assert linked_tree.lay_out(_entries(site), staging) == linked_tree.COPIED
    original, copied = site / "numpy" / "core" / "umath.py", staging / "numpy" / "core" / "umath.py"
    assert os.stat(original).st_ino != os.stat(copied).st_ino and copied.read_text() == "y = 2\n"
    assert copied.stat().st_mode & 0o777 == 0o644 and original.stat().st_mode & 0o777 == 0o664
    assert sorted(p.name for p in staging.iterdir()) == ["numpy", "numpy.pth"]


def test_another_filesystem_is_copied(tmp_path, monkeypatch):
    site, staging = _site(tmp_path), tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setattr(linked_tree, "_same_filesystem", lambda a, b: False)
    assert linked_tree.lay_out(_entries(site), staging) == linked_tree.COPIED
    assert os.stat(site / "numpy" / "__init__.py").st_ino != os.stat(staging / "numpy" / "__init__.py").st_ino


def test_copytrees_function_links_where_it_can_and_copies_elsewhere(tmp_path, monkeypatch):
    import shutil

    site = _site(tmp_path)
    shutil.copytree(site, tmp_path / "linked", symlinks=True, copy_function=linked_tree.link_or_copy)
    linked = tmp_path / "linked" / "numpy" / "__init__.py"
    assert os.stat(linked).st_ino == os.stat(site / "numpy" / "__init__.py").st_ino
    assert os.path.islink(tmp_path / "linked" / "numpy.pth")

    def cross_device(*_args, **_kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(linked_tree.os, "link", cross_device)
    shutil.copytree(site, tmp_path / "copied", symlinks=True, copy_function=linked_tree.link_or_copy)
    copied = tmp_path / "copied" / "numpy" / "__init__.py"
    assert os.stat(copied).st_ino != os.stat(site / "numpy" / "__init__.py").st_ino and copied.read_text() == "x = 1\n"
