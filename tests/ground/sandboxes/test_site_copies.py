"""The pruned site-packages copies: held while in use, the least recently used others collected."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ground.sandboxes import packages, site_copies
from ground.sandboxes.packages import pruned_site_dir
from ground.sandboxes.site_copies import SiteCacheConfigError, collect, hold, policy


def make_copy(root: Path, key: str, *, kib: int = 64, age_s: float = 0.0) -> None:
    """A copy of `kib` KiB last used `age_s` ago (its lock file's time)."""
    (root / key).mkdir(parents=True)
    (root / key / "mod.py").write_bytes(os.urandom(kib << 10))
    site_copies.record_size(root, key)
    (root / f"{key}.lock").touch()
    then = time.time() - age_s
    os.utime(root / f"{key}.lock", (then, then))


def present(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv(site_copies.KEEP_ENV, raising=False)
    monkeypatch.delenv(site_copies.MAX_GB_ENV, raising=False)
    path = tmp_path / "site-packages"
    path.mkdir()
    return path


def test_the_newest_copies_stay_and_the_older_ones_go_with_their_files(root, monkeypatch):
    monkeypatch.setenv(site_copies.KEEP_ENV, "2")
    for age, key in enumerate(["new", "mid", "old", "older"]):
        make_copy(root, key, age_s=age * 100)
    assert sorted(collect(root, current="new")) == ["old", "older"]
    assert present(root) == ["mid", "mid.lock", "mid.size", "new", "new.lock", "new.size"]


def test_the_total_size_is_bounded_but_the_copy_just_built_always_stays(root, monkeypatch):
    monkeypatch.setenv(site_copies.MAX_GB_ENV, str(150 / (1 << 20)))  # 150 KiB
    make_copy(root, "current", kib=200, age_s=50)  # over the bound alone
    make_copy(root, "recent", kib=64, age_s=10)
    make_copy(root, "stale", kib=64, age_s=100)
    assert collect(root, current="current") == ["stale"]
    assert {"current", "recent"} <= set(present(root))


def test_a_copy_another_process_holds_is_never_removed(root, monkeypatch):
    monkeypatch.setenv(site_copies.KEEP_ENV, "1")
    make_copy(root, "new")
    make_copy(root, "in-use", age_s=500)
    make_copy(root, "stale", age_s=900)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()", str(root / "in-use.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert collect(root, current="new") == ["stale"]
        assert (root / "in-use" / "mod.py").is_file()
    finally:
        holder.communicate("")
    assert collect(root, current="new") == ["in-use"]  # once its user is gone


def test_a_copy_this_process_holds_stays_and_a_collected_lock_is_held_afresh(root, monkeypatch):
    monkeypatch.setenv(site_copies.KEEP_ENV, "1")
    make_copy(root, "new")
    make_copy(root, "mine", age_s=500)
    hold(root, "mine")
    assert collect(root, current="new") == [] and (root / "mine").is_dir()
    assert os.stat(root / "mine.lock").st_mtime > time.time() - 60  # held is used: now
    make_copy(root, "gone", age_s=900)
    assert collect(root, current="new") == ["gone"] and not (root / "gone.lock").exists()
    hold(root, "gone")  # a lock file made anew, not the removed one
    assert (root / "gone.lock").is_file()


def test_what_killed_builds_and_removals_left_is_cleared(root):
    make_copy(root, "new")
    stale_stage, fresh_stage, trash = root / ".abc-old", root / ".def-building", root / ".trash-x-1"
    for path in (stale_stage, fresh_stage, trash):
        path.mkdir()
    os.utime(stale_stage, (0, 0))
    (root / "nocopy.lock").touch()
    collect(root, current="new")
    assert present(root) == [".def-building", "new", "new.lock", "new.size"]


@pytest.mark.parametrize(("keep", "max_gb"), [("0", "1"), ("x", "1"), ("2", "-1"), ("2", "nan"), ("2", "lots")])
def test_a_bad_setting_is_one_clear_line(monkeypatch, keep, max_gb):
    monkeypatch.setenv(site_copies.KEEP_ENV, keep)
    monkeypatch.setenv(site_copies.MAX_GB_ENV, max_gb)
    with pytest.raises(SiteCacheConfigError, match=r"\$TWIN_SITE_CACHE_KEEP .*\$TWIN_SITE_CACHE_MAX_GB") as e:
        policy()
    assert "\n" not in str(e.value)


def test_building_a_copy_notes_its_size_and_collects_the_stale_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(site_copies.KEEP_ENV, "2")
    root = tmp_path / "cache" / "site-packages"
    for age, key in enumerate(["a", "b", "c"]):
        make_copy(root, key, age_s=100 + age)
    site = tmp_path / "venv" / "site-packages"
    (site / "numpy").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("x = 1\n")
    (site / "torch").mkdir()
    copy = pruned_site_dir(site, frozenset({"torch"}))
    assert copy is not None and (copy / "numpy" / "__init__.py").is_file() and not (copy / "torch").exists()
    assert int((root / f"{copy.name}.size").read_text()) > 0
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted([copy.name, "a"])
    assert pruned_site_dir(site, frozenset({"torch"})) == copy  # reused, nothing collected


def test_sandboxes_starting_at_once_wait_for_one_copy_rather_than_each_making_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    site = tmp_path / "venv" / "site-packages"
    (site / "numpy").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("x = 1\n")
    built: list[int] = []
    real_copy = packages._copy_without

    def slow_copy(*args):
        built.append(threading.get_ident())
        time.sleep(0.3)  # long enough for every other thread to arrive while this one copies
        real_copy(*args)

    monkeypatch.setattr(packages, "_copy_without", slow_copy)
    with ThreadPoolExecutor(4) as pool:
        copies = list(pool.map(lambda _: pruned_site_dir(site, frozenset({"torch"})), range(4)))
    assert len(built) == 1
    assert copies[0] is not None and set(copies) == {copies[0]} and (copies[0] / "numpy").is_dir()
    assert not [p for p in (tmp_path / "cache" / "site-packages").iterdir() if p.name.startswith(".")]


def test_a_copy_in_a_cache_this_user_cannot_write_is_used_unheld(root, monkeypatch):
    make_copy(root, "prebuilt")

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(site_copies, "_hold", refused)
    hold(root, "prebuilt")  # no error: the sandbox starts on the copy as it is
    assert (root / "prebuilt").is_dir()
