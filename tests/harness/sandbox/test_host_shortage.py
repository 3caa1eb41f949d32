"""host_shortage: which of twin's host filesystems an unprivileged writer has run out of."""

from __future__ import annotations

import os

import pytest

from harness.sandbox import disk


def _statvfs(bavail: int, favail: int, files: int):
    # bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax
    return os.statvfs_result((4096, 4096, 10**7, bavail, bavail, files, favail, favail, 0, 255))


@pytest.mark.parametrize(
    ("bavail", "favail", "says"),
    [(0, 5000, "0 MiB free"), (15_000, 5000, "58 MiB free"), (10**6, 10, "10 inodes free"), (10**6, 5000, None)],
)
def test_space_or_inodes_below_the_floor_are_named(tmp_path, monkeypatch, bavail, favail, says):
    monkeypatch.setattr(disk.os, "statvfs", lambda path: _statvfs(bavail, favail, files=10_000))
    found = disk.host_shortage([tmp_path])
    assert (found is None) if says is None else (says in found and str(tmp_path) in found)


def test_a_path_that_cannot_be_examined_is_skipped_and_a_real_roomy_one_passes(tmp_path):
    assert disk.host_shortage([tmp_path / "absent", tmp_path]) is None
