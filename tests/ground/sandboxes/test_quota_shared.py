"""Capped roots that others touch meanwhile: sandboxes built at once, a root mounted elsewhere, a root
unmounted under its users, and records that name no place twin puts a root."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ground.boundary import Boundary, Mount
from ground.sandbox import SandboxError
from ground.sandboxes import quota, quota_records, quota_recovery
from ground.sandboxes.quota import TMPFS, CappedRoot, cap_writable_roots, recover_capped, release_all
from tests.ground.sandboxes.test_quota import assert_same_tree, leftovers, make_tree, own_stage, requires_mount

__all__ = ["own_stage"]  # its records under this test's own stage (autouse)


def dead_record(name: str, origin: str, state: str = "mounted") -> Path:
    """A record as a killed twin left it (owner gone)."""
    record = quota_records.records_dir() / name
    record.mkdir()
    for field, text in (("owner", "999999999 1"), ("origin", origin), ("kind", TMPFS), ("state", state)):
        quota_records.write_field(record, field, text)
    return record


@requires_mount
def test_two_sandboxes_capping_one_root_at_once_share_one_mount(tmp_path, monkeypatch):
    """The second caller looks while the first is between setting the tree aside and mounting: it must
    wait and share that root, never set aside or unmount what the first is mounting."""
    root = make_tree(tmp_path / "work")
    boundary = Boundary(name="b", mounts=[Mount(host=root, inside="/work", writable=True)])
    first_mounting, real_run = threading.Event(), quota.run_tool

    def slow_mount(*argv):
        if argv[0] == "mount" and not first_mounting.is_set():
            first_mounting.set()
            time.sleep(0.5)  # the window the second caller used to come in by
        real_run(*argv)

    monkeypatch.setattr(quota, "run_tool", slow_mount)
    got: dict[str, list] = {}
    first = threading.Thread(target=lambda: got.setdefault("first", cap_writable_roots(boundary)))
    first.start()
    assert first_mounting.wait(10)
    got["second"] = cap_writable_roots(boundary)
    first.join()
    assert len(got["first"]) == len(got["second"]) == 1 and got["first"][0] is got["second"][0]
    assert os.path.ismount(root) and got["first"][0].lost() is None
    (root / "late.txt").write_text("late\n")
    release_all(got["first"])
    assert os.path.ismount(root)
    release_all(got["second"])
    assert not os.path.ismount(root) and (root / "late.txt").read_text() == "late\n"
    assert_same_tree(root)
    assert leftovers(root) == [] and list(quota_records.records_dir().iterdir()) == []


@requires_mount
def test_a_root_whose_tree_cannot_be_set_aside_is_left_as_it_was(tmp_path, monkeypatch, caplog):
    """The rename that sets a tree aside fails with EBUSY where the folder is a mount point in this
    namespace that the look before missed: one line, a watched cap, nothing at the folder touched
    (no unmount, no record left)."""
    import errno

    root = make_tree(tmp_path / "work")
    real_rename, unmounted = os.rename, []

    def busy_rename(src, dst, **dir_fds):
        if Path(src) == root:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        real_rename(src, dst, **dir_fds)

    monkeypatch.setattr(quota.os, "rename", busy_rename)
    monkeypatch.setattr(quota_recovery, "_unmount", unmounted.append)
    with caplog.at_level("WARNING", logger=quota.log.name):
        assert CappedRoot.mount(root, 16, TMPFS) is None
    monkeypatch.undo()
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot put {root} on a capped tmpfs: [Errno 16] Device or resource busy"
    ]
    assert unmounted == [] and not os.path.ismount(root)
    assert_same_tree(root)
    assert leftovers(root) == [] and list(quota_records.records_dir().iterdir()) == []


@requires_mount
def test_a_record_whose_tree_was_never_set_aside_leaves_what_is_mounted_there_alone(tmp_path):
    """A record stopped at `in` before its rename: what is mounted at its origin is another root's."""
    root = tmp_path / "work"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "other", str(root)], check=True)
    try:
        (root / "theirs.txt").write_text("theirs\n")
        record = dead_record("qearly", str(root), state="in")
        recover_capped()
        assert os.path.ismount(root) and (root / "theirs.txt").read_text() == "theirs\n"
        assert not record.exists()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@requires_mount
def test_a_root_unmounted_under_its_users_is_said_lost_and_never_recorded_as_slash(tmp_path, caplog):
    """A filesystem detached while its descriptor is held reads, through /proc, as "/" (a mount point):
    the release must not take that for the place its folder was moved to."""
    root = make_tree(tmp_path / "work")
    capped = CappedRoot.mount(root, 16, TMPFS)
    assert capped is not None and capped.lost() is None and quota.lost_roots([capped]) == []
    subprocess.run(["umount", "-l", str(root)], check=True)
    assert "unmounted while in use" in capped.lost() and quota.lost_roots([capped]) == [capped.lost()]
    origins, real_write = [], quota_records.write_field

    def write_field(record, name, text):
        if name == "origin":
            origins.append(text)
        real_write(record, name, text)

    with pytest.MonkeyPatch.context() as patch, caplog.at_level("WARNING", logger=quota.log.name):
        patch.setattr(quota_records, "write_field", write_field)
        capped.release()
    assert origins == [] and not capped.record.exists()
    assert any("unmounted while in use" in r.getMessage() for r in caplog.records)
    assert root.is_dir() and not os.path.ismount(root) and leftovers(root) == []
    quota._release_at_exit()  # nothing left for the exit to trip on


@pytest.mark.parametrize("origin", ["/", "relative/work", "/tmp/x/../work", "/tmp/.work.twin-in"])
def test_recovery_refuses_a_record_that_names_no_place_for_a_root(tmp_path, caplog, origin):
    """One line, the record (twin's own) dropped, and the next record still recovered."""
    bad = dead_record("qbad", origin)
    gone = dead_record("qgone", str(tmp_path / "removed" / "work"))
    with caplog.at_level("WARNING", logger=quota_recovery.log.name):
        recover_capped()
    assert not bad.exists() and not gone.exists()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "not acted on" in lines[0] and repr(origin) in lines[0]
    assert os.path.isdir("/tmp")


def test_a_record_naming_slash_that_is_not_twins_own_is_left_in_place(tmp_path):
    record = dead_record("qforeign", "/")
    os.chown(record, 65534, 65534)
    with pytest.raises(SandboxError, match="not acted on"):
        quota_recovery.recover_record(record)
    assert record.exists()


def test_a_root_given_as_slash_or_a_relative_path_is_never_mounted(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(quota, "unavailable", lambda kind: None)
    with caplog.at_level("WARNING", logger=quota.log.name):
        assert CappedRoot.mount(Path("/"), 16, TMPFS) is None
    assert "the root of the filesystem" in caplog.text
    assert list(quota_records.records_dir().iterdir()) == []
