"""The pruned site-packages copy: built once per environment state, never left half-made."""

from __future__ import annotations

import subprocess

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

    monkeypatch.setattr(packages.subprocess, "run", full_disk)
    assert packages.pruned_site_dir(_site(tmp_path), frozenset({"torch"})) is None
    left = list((tmp_path / "cache" / "site-packages").iterdir())
    assert [p for p in left if p.suffix not in (".lock", ".build")] == []  # no partial copy; only its two lock files
