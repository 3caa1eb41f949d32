"""The pruned site-packages copy: built once per environment state, never left half-made."""

from __future__ import annotations

import subprocess

from ground import linked_tree
from ground.sandboxes import packages


def _site(base):
    site = base / "site-packages"
    (site / "kept").mkdir(parents=True)
    (site / "kept" / "__init__.py").write_text("")
    (site / "torch").mkdir()
    return site


def test_pruned_copy_leaves_out_what_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    pruned = packages.pruned_site_dir(_site(tmp_path), frozenset({"torch"}))
    assert pruned is not None and sorted(p.name for p in pruned.iterdir()) == ["kept"]


def test_a_failed_pruned_copy_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    real_run = subprocess.run

    def full_disk(command, **kwargs):
        if command[0] == "cp":
            staging = command[-1]
            real_run(["cp", "-a", "--", command[-2], staging], check=True)
            raise subprocess.CalledProcessError(1, command, stderr=b"cp: No space left on device")
        return real_run(command, **kwargs)

    monkeypatch.setattr(linked_tree.subprocess, "run", full_disk)
    assert packages.pruned_site_dir(_site(tmp_path), frozenset({"torch"})) is None
    left = list((tmp_path / "cache" / "site-packages").iterdir())
    assert [p for p in left if p.suffix not in (".lock", ".build")] == []  # no partial copy; only its two lock files


def test_the_pruned_tree_links_the_environments_files_and_says_a_long_build(tmp_path, monkeypatch, capfd):
    import os
    import time

    from ground import waiting

    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(waiting, "NOTICE_S", 0.05)
    monkeypatch.delenv("TWIN_WAIT_NOTICE_S")
    real_copy = packages._copy_without
    monkeypatch.setattr(packages, "_copy_without", lambda *a: (time.sleep(0.3), real_copy(*a))[1])
    site = _site(tmp_path)
    pruned = packages.pruned_site_dir(site, frozenset({"torch"}))
    assert pruned is not None and not (pruned / "torch").exists()  # physically absent
    assert os.stat(pruned / "kept" / "__init__.py").st_ino == os.stat(site / "kept" / "__init__.py").st_ino
    err = capfd.readouterr().err
    assert f"twin: waiting for {site} laid out without torch (the sandboxes' site-packages" in err
    assert "twin: done:" in err
