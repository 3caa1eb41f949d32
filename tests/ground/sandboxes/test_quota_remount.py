"""A record's image is mounted again only once the kernel has let go of its last mount."""

from __future__ import annotations

import subprocess

import pytest

from ground.sandbox import SandboxError
from ground.sandboxes import quota_recovery
from ground.sandboxes.quota import EXT4, unavailable


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, ...]]:
    """What the remount ran, with e2fsck and mount stood in for (nothing is mounted)."""
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(quota_recovery, "REMOUNT_S", 0.5)
    monkeypatch.setattr(quota_recovery.subprocess, "run", lambda argv, **_: ran.append(tuple(argv[:1])))
    return ran


def test_an_image_still_attached_is_neither_checked_nor_mounted(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(quota_recovery, "_attached", lambda image: True)  # a process holds the lazily unmounted one
    monkeypatch.setattr(quota_recovery, "run_tool", lambda *argv: calls.append(argv[:1]))
    with pytest.raises(SandboxError, match=r"unmounted but is still in use \(a process holds it\)"):
        quota_recovery._mount_again(tmp_path / "image.ext4", tmp_path / "app")
    assert calls == []


def test_an_image_let_go_late_is_checked_once_and_mounted_when_the_kernel_lets_it(tmp_path, calls, monkeypatch):
    attached = iter([True, True, False])
    monkeypatch.setattr(quota_recovery, "_attached", lambda image: next(attached))
    failures = iter([True, False])

    def mount(*argv: str) -> None:
        calls.append(argv[:1])
        if next(failures):
            raise subprocess.CalledProcessError(32, argv)

    monkeypatch.setattr(quota_recovery, "run_tool", mount)
    quota_recovery._mount_again(tmp_path / "image.ext4", tmp_path / "app")
    assert calls == [("e2fsck",), ("mount",), ("mount",)] and (tmp_path / "app").is_dir()


def test_a_mount_that_keeps_failing_fails_after_the_wait(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(quota_recovery, "_attached", lambda image: False)

    def mount(*argv: str) -> None:
        calls.append(argv[:1])
        raise subprocess.CalledProcessError(32, argv)

    monkeypatch.setattr(quota_recovery, "run_tool", mount)
    with pytest.raises(subprocess.CalledProcessError):
        quota_recovery._mount_again(tmp_path / "image.ext4", tmp_path / "app")
    assert calls[0] == ("e2fsck",) and 2 <= calls.count(("mount",)) <= 10


def test_attached_reads_the_loop_devices_backing_files(tmp_path):
    if unavailable(EXT4) is not None:
        pytest.skip(f"no loop devices here: {unavailable(EXT4)}")
    image = tmp_path / "image.ext4"
    image.write_bytes(bytes(1 << 20))
    assert quota_recovery._attached(image) is False
    device = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True, check=True)
    try:
        assert quota_recovery._attached(image) is True
    finally:
        subprocess.run(["losetup", "-d", device.stdout.strip()], check=True)
    assert quota_recovery._attached(image) is False
