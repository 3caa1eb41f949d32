"""The host disk under twin: room left (host_shortage), images allocated whole, writes checked."""

from __future__ import annotations

import ctypes
import os

import pytest

from ground.sandboxes import host_disk


def _statvfs(bavail: int, favail: int, files: int):
    # bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax
    return os.statvfs_result((4096, 4096, 10**7, bavail, bavail, files, favail, favail, 0, 255))


@pytest.mark.parametrize(
    ("bavail", "favail", "says"),
    [(0, 5000, "0 MiB free"), (15_000, 5000, "58 MiB free"), (10**6, 10, "10 inodes free"), (10**6, 5000, None)],
)
def test_space_or_inodes_below_the_floor_are_named(tmp_path, monkeypatch, bavail, favail, says):
    monkeypatch.setattr(host_disk.os, "statvfs", lambda path: _statvfs(bavail, favail, files=10_000))
    found = host_disk.host_shortage([tmp_path])
    assert (found is None) if says is None else (says in found and str(tmp_path) in found)


def test_a_path_that_cannot_be_examined_is_skipped_and_a_real_roomy_one_passes(tmp_path):
    assert host_disk.host_shortage([tmp_path / "absent", tmp_path]) is None


def test_a_file_allocated_whole_holds_its_blocks_and_a_sync_of_a_healthy_filesystem_passes(tmp_path):
    image = tmp_path / "image"
    host_disk.allocate(image, 4 << 20, what="a test image")
    assert image.stat().st_size == 4 << 20 and host_disk.allocated_bytes(image) >= 4 << 20
    with pytest.raises(FileExistsError):  # never over an existing file
        host_disk.allocate(image, 1 << 20, what="a test image")
    host_disk.sync_filesystem(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        host_disk.sync_filesystem(fd)
    finally:
        os.close(fd)


def test_no_room_is_one_line_naming_what_it_was_for_and_leaves_no_file(tmp_path, monkeypatch):
    import errno

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(host_disk.os, "posix_fallocate", full)
    with pytest.raises(host_disk.HostDiskFull, match=r"no room on the host for the thing: 8 MiB needed in ") as e:
        host_disk.allocate(tmp_path / "image", 8 << 20, what="the thing")
    assert "\n" not in str(e.value) and not (tmp_path / "image").exists()


def test_a_sync_error_is_raised_with_its_errno(monkeypatch, tmp_path):
    import errno

    class FailingLibc:
        def syncfs(self, fd):
            ctypes.set_errno(errno.EIO)
            return -1

    monkeypatch.setattr(host_disk, "_libc", lambda: FailingLibc())
    with pytest.raises(OSError) as e:
        host_disk.sync_filesystem(tmp_path)
    assert e.value.errno == errno.EIO
