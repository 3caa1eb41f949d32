"""Capped filesystems under writable roots: the tree in and out, failures, a killed owner, the watch."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from ground.sandboxes import quota, quota_records, quota_recovery
from ground.sandboxes.disk import DiskWatch
from ground.sandboxes.quota import EXT4, TMPFS, CappedRoot, recover_capped, unavailable

requires_mount = pytest.mark.skipif(
    unavailable(EXT4) is not None, reason=f"cannot mount a capped filesystem here: {unavailable(EXT4)}"
)
KINDS = [EXT4, TMPFS]


@pytest.fixture(autouse=True)
def own_stage(tmp_path_factory):
    """Records under a stage of this test's own: a twin starting elsewhere meanwhile (another
    test worker) releases what a dead owner left, as it should, before this test looks.
    (Its own MonkeyPatch: a test's `monkeypatch.undo()` leaves it in place.)"""
    stage = tmp_path_factory.mktemp("stage")
    os.chmod(stage, 0o711)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TWIN_STAGE_DIR", str(stage))
        yield


def make_tree(root: Path) -> Path:
    """A tree with what an agent leaves: nested files, links in and out, a FIFO, hard links, modes."""
    root.mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "model.py").write_text("x = 1\n")
    (root / "secret.txt").write_text("s\n")
    os.chmod(root / "secret.txt", 0o640)
    os.symlink("pkg/model.py", root / "inside")
    os.symlink("/etc/shadow", root / "outward")
    os.mkfifo(root / "pipe")
    os.link(root / "pkg" / "model.py", root / "hard")
    os.chown(root / "pkg", 65534, 65534)
    return root


def assert_same_tree(root: Path) -> None:
    assert (root / "pkg" / "model.py").read_text() == "x = 1\n"
    assert stat.S_IMODE(os.stat(root / "secret.txt").st_mode) == 0o640
    assert os.readlink(root / "inside") == "pkg/model.py"
    assert os.readlink(root / "outward") == "/etc/shadow"
    assert stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)
    assert os.stat(root / "hard").st_ino == os.stat(root / "pkg" / "model.py").st_ino
    assert os.stat(root / "pkg").st_uid == 65534


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir() if p.name.startswith(f".{root.name}.twin-"))


@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_the_tree_goes_in_and_comes_back_out_with_what_was_written(tmp_path, kind):
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, kind)
    assert capped is not None
    try:
        assert os.path.ismount(root) and quota.is_capped(root)
        assert_same_tree(root)
        assert not (root / "lost+found").exists()
        size = os.statvfs(root).f_blocks * os.statvfs(root).f_frsize
        assert 12 << 20 < size <= 16 << 20
        (root / "new.txt").write_text("written while mounted\n")
        assert CappedRoot.mount(root, 16, kind) is None  # never stacked on itself
    finally:
        capped.release()
    assert not os.path.ismount(root) and not quota.is_capped(root)
    assert_same_tree(root)
    assert (root / "new.txt").read_text() == "written while mounted\n"
    assert leftovers(root) == [] and not capped.record.exists()
    capped.release()  # idempotent


@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_a_tree_larger_than_the_cap_is_left_as_it_was(tmp_path, kind):
    root = make_tree(tmp_path / "candidate")
    (root / "big.bin").write_bytes(os.urandom(12 << 20))
    assert CappedRoot.mount(root, 8, kind) is None
    assert not os.path.ismount(root)
    assert_same_tree(root)
    assert (root / "big.bin").stat().st_size == 12 << 20
    assert leftovers(root) == []


@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_owner_mounted_root_is_copied_out_at_the_next_start(tmp_path, kind):
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, kind)
    (root / "late.txt").write_text("late\n")
    forget(capped)
    assert os.path.ismount(root)
    assert root in recover_capped()
    assert not os.path.ismount(root) and not capped.record.exists()
    assert_same_tree(root)
    assert (root / "late.txt").read_text() == "late\n"
    assert leftovers(root) == []


@requires_mount
def test_a_killed_owner_mid_copy_in_gets_the_original_back(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "candidate")
    real_run = quota.run_tool

    def dies_copying(*argv):
        if argv[0] == "cp":
            raise KeyboardInterrupt  # the process ends here: nothing else of twin's runs
        real_run(*argv)

    monkeypatch.setattr(quota, "run_tool", dies_copying)
    with pytest.raises(KeyboardInterrupt):
        CappedRoot.mount(root, 16, EXT4)
    monkeypatch.undo()
    records = quota_records.records_dir().iterdir()
    record = next(p for p in records if quota_records.read_field(p, "origin") == str(root))
    (record / "owner").write_text("999999999 1")
    assert os.path.ismount(root)  # mounted, empty, the tree aside
    assert root in recover_capped()
    assert not os.path.ismount(root)
    assert_same_tree(root)
    assert leftovers(root) == []


@pytest.mark.parametrize("state", ["in", "mounted", "out"])
def test_a_dead_owners_record_whose_folder_is_gone_is_dropped_without_a_warning(tmp_path, caplog, state):
    record = quota_records.records_dir() / "qgone"
    record.mkdir()
    gone = tmp_path / "removed-scratch" / "work"
    for name, text in (("owner", "999999999 1"), ("origin", str(gone)), ("kind", TMPFS), ("state", state)):
        quota_records.write_field(record, name, text)
    with caplog.at_level("WARNING", logger=quota.log.name):
        recover_capped()
    assert not record.exists() and not gone.parent.exists() and caplog.records == []


@requires_mount
def test_a_killed_owner_after_the_copy_out_is_swapped_in(tmp_path):
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, EXT4)
    (root / "late.txt").write_text("late\n")
    forget(capped)
    out = root.with_name(f".{root.name}.twin-out")
    os.mkdir(out)
    quota.run_tool(*quota.COPY_TREE, f"{root}/.", f"{out}/")
    quota_records.write_field(capped.record, "state", "out")
    assert root in recover_capped()
    assert not os.path.ismount(root)
    assert (root / "late.txt").read_text() == "late\n"
    assert leftovers(root) == []


def test_not_root_means_a_watched_cap_only(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable(EXT4) == unavailable(TMPFS) == "twin does not run as root"
    root = make_tree(tmp_path / "candidate")
    assert CappedRoot.mount(root, 16, EXT4) is None
    assert not os.path.ismount(root)


@requires_mount
def test_the_watch_counts_a_file_unlinked_while_open(tmp_path):
    root = tmp_path / "candidate"
    root.mkdir()
    capped = CappedRoot.mount(root, 16, TMPFS)
    try:
        watch = DiskWatch([root], 8)
        watch.budgeted(watch_limits())
        with open(root / "held", "wb") as fh:
            os.unlink(root / "held")
            fh.write(b"x" * (9 << 20))
            fh.flush()
            assert watch.over() is not None and "reaching its cap of 8 MiB" in watch.over()
            assert DiskWatch([root], 64).over() is None
        assert watch.over() is None  # closed: the blocks are free again
    finally:
        capped.release()


def watch_limits():
    from ground.boundary import Limits

    return Limits(disk_mb=8)


def forget(capped: CappedRoot) -> None:
    """Make `capped` look like another, killed process's: out of this process's registry, owner dead."""
    with quota._LOCK:
        quota._ACTIVE.pop(str(capped.path), None)
    (capped.record / "owner").write_text("999999999 1")


@requires_mount
def test_a_root_shared_by_two_sandboxes_stays_mounted_until_the_last_is_done(tmp_path):
    from ground.boundary import Boundary, Mount
    from ground.sandboxes.quota import cap_writable_roots, release_all

    root = make_tree(tmp_path / "candidate")
    boundary = Boundary(name="b", mounts=[Mount(host=root, inside="/app", writable=True)])
    first = cap_writable_roots(boundary)
    second = cap_writable_roots(boundary)
    assert len(first) == len(second) == 1 and first[0] is second[0]
    release_all(first)
    assert os.path.ismount(root)  # the second sandbox still writes there
    release_all(second)
    assert not os.path.ismount(root)
    assert_same_tree(root)


@requires_mount
def test_an_interpreter_that_exits_without_releasing_leaves_no_mount(tmp_path):
    import subprocess
    import sys

    root = make_tree(tmp_path / "candidate")
    script = (
        "import sys; from pathlib import Path; from ground.sandboxes.quota import CappedRoot, EXT4\n"
        "root = Path(sys.argv[1]); assert CappedRoot.mount(root, 16, EXT4) is not None\n"
        "(root / 'late.txt').write_text('late')\n"
        "raise SystemExit('an uncaught error, nothing closed')\n"
    )
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", script, str(root)], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 1 and "nothing closed" in done.stderr
    assert not os.path.ismount(root)
    assert (root / "late.txt").read_text() == "late"
    assert_same_tree(root)


# ---- the host's own disk: the image allocated whole, writes checked, nothing half-copied swapped in --
@pytest.fixture()
def small_host(tmp_path):
    """A host filesystem of 24 MiB (a tmpfs) holding the stage, and so the capped roots' images.

    (Its own MonkeyPatch, as `own_stage`'s: the test's would restore the stage after `own_stage` has.)"""
    host = tmp_path / "host"
    host.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "twin-test-host", str(host)], check=True)
    os.chmod(host, 0o711)
    patch = pytest.MonkeyPatch()
    patch.setenv("TWIN_STAGE_DIR", str(host))
    try:
        yield host
    finally:  # a root a failing test left mounted goes first: nothing of a test outlives it
        with quota._LOCK:
            left = [root for key, root in quota._ACTIVE.items() if Path(key).is_relative_to(tmp_path)]
            for root in left:
                del quota._ACTIVE[str(root.path)]
        for root in left:
            root._close()
            subprocess.run(["umount", "-l", str(root.path)], check=False)
        subprocess.run(["umount", "-l", str(host)], check=False)
        patch.undo()


def fill(host: Path) -> Path:
    """Write a file until `host` is full; return it (remove it to give the room back)."""
    filler = host / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\1" * (1 << 16))
                fh.flush()
        except OSError:
            pass
    return filler


@requires_mount
def test_an_image_is_allocated_whole_before_it_is_used(tmp_path):
    from ground.sandboxes.host_disk import allocated_bytes

    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, EXT4)
    try:
        assert allocated_bytes(capped.record / "image.ext4") >= 16 << 20  # mkfs punched no hole back
    finally:
        capped.release()


@requires_mount
def test_a_host_without_room_for_the_image_is_refused_in_one_line_and_the_tree_left_alone(tmp_path, small_host):
    from ground.sandboxes.host_disk import HostDiskFull

    root = make_tree(tmp_path / "candidate")
    with pytest.raises(HostDiskFull, match=r"no room on the host for the capped filesystem of .*32 MiB needed") as e:
        CappedRoot.mount(root, 32, EXT4)
    assert "\n" not in str(e.value)
    assert not os.path.ismount(root) and not quota.is_capped(root)
    assert_same_tree(root)
    assert leftovers(root) == [] and list((small_host / "quota").iterdir()) == []


@requires_mount
def test_what_is_written_while_the_host_is_full_comes_back_whole(tmp_path, small_host):
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 8, EXT4)
    filler = fill(small_host)
    data = os.urandom(4 << 20)
    (root / "weights.bin").write_bytes(data)
    capped.check_written()  # the writes reached the image: its blocks were the host's already
    filler.unlink()
    capped.release()
    assert (root / "weights.bin").read_bytes() == data


@requires_mount
def test_writes_a_sparse_image_lost_are_reported_and_the_tree_is_not_replaced(tmp_path, small_host, monkeypatch):
    from ground.sandbox import SandboxError

    def sparse(path, size, *, what):  # what twin did before: the image's blocks taken only when written
        with open(path, "wb") as fh:
            fh.truncate(size)

    monkeypatch.setattr(quota, "allocate", sparse)
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, EXT4)
    filler = fill(small_host)
    (root / "weights.bin").write_bytes(os.urandom(8 << 20))
    with pytest.raises(SandboxError, match="lost writes"):
        capped.release()
    assert os.path.ismount(root) and quota.is_capped(root)  # still the run's, nothing copied out over it
    assert leftovers(root) == []
    filler.unlink()
    capped.release()  # tried again once there is room
    assert not os.path.ismount(root) and not quota.is_capped(root)


@requires_mount
def test_a_copy_out_the_host_has_no_room_for_replaces_nothing(tmp_path, small_host):
    (tmp_path / "stage").mkdir(mode=0o711)
    os.environ["TWIN_STAGE_DIR"] = str(tmp_path / "stage")  # small_host restores it
    root = make_tree(small_host / "candidate")  # the candidate's folder on the small host, its image elsewhere
    capped = CappedRoot.mount(root, 16, EXT4)
    data = os.urandom(6 << 20)
    (root / "weights.bin").write_bytes(data)
    filler = fill(small_host)
    with pytest.raises(subprocess.CalledProcessError):
        capped.release()
    assert os.path.ismount(root) and (root / "weights.bin").read_bytes() == data
    assert leftovers(root) == []  # the partial copy is gone
    filler.unlink()
    capped.release()
    assert not os.path.ismount(root) and (root / "weights.bin").read_bytes() == data
    assert_same_tree(root)



@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_only_a_candidates_copy_out_is_flushed_to_the_host(tmp_path, monkeypatch, kind):
    synced: list[str] = []
    real = quota_recovery.sync_filesystem  # the copy out (its flush) is the recovery's step
    monkeypatch.setattr(quota_recovery, "sync_filesystem", lambda path: synced.append(str(path)) or real(path))
    root = make_tree(tmp_path / "candidate")
    CappedRoot.mount(root, 16, kind).release()
    assert (str(quota.sibling(root, "out")) in synced) is (kind == EXT4)  # a syncfs flushes the whole host disk
    assert_same_tree(root)


# ---- the copy out: no setuid, setgid or capability reaches the host; a tree too large to settle stays --
SETID = stat.S_ISUID | stat.S_ISGID


def plant_privileges(root: Path) -> None:
    """What a sandbox could leave behind after the last settle: setid files owned by it, a capability."""
    for name, mode in (("suid", 0o4755), ("sgid", 0o2750), ("both", 0o6711)):
        (root / name).write_text("#!/bin/sh\nid\n")
        os.chown(root / name, 65534, 65534)
        os.chmod(root / name, mode)
    (root / "d").mkdir()
    os.chmod(root / "d", 0o2775)
    (root / "cap").write_text("x")
    subprocess.run(["setcap", "cap_net_raw+ep", str(root / "cap")], check=True, capture_output=True)


@requires_mount
@pytest.mark.skipif(subprocess.run(["which", "setcap"], capture_output=True).returncode != 0, reason="no setcap")
@pytest.mark.parametrize("how", ["release", "recovery"])
def test_the_copy_out_carries_no_setid_bit_and_no_capability(tmp_path, how):
    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, EXT4)
    assert capped is not None
    plant_privileges(root)
    if how == "release":
        capped.release()
    else:
        forget(capped)
        assert root in recover_capped()
    assert not os.path.ismount(root)
    assert_same_tree(root)
    modes = {name: os.stat(root / name).st_mode for name in ("suid", "sgid", "both", "d", "cap")}
    assert all(not mode & SETID for mode in modes.values()), {n: oct(m) for n, m in modes.items()}
    assert {n: stat.S_IMODE(m) for n, m in modes.items() if n != "cap"} == {
        "suid": 0o755, "sgid": 0o750, "both": 0o711, "d": 0o775,
    }  # fmt: skip
    assert os.stat(root / "suid").st_uid == 65534
    with pytest.raises(OSError):
        os.getxattr(root / "cap", "security.capability", follow_symlinks=False)


@requires_mount
def test_a_tree_too_large_to_settle_is_not_copied_out(tmp_path, monkeypatch):
    from ground.sandbox import SandboxError
    from ground.sandboxes import privilege

    root = make_tree(tmp_path / "candidate")
    capped = CappedRoot.mount(root, 16, EXT4)
    assert capped is not None
    for i in range(20):
        os.link(root / "pkg" / "model.py", root / f"alias{i}")
    os.chmod(root / "pkg" / "model.py", 0o4755)  # each name is the same setuid file
    monkeypatch.setattr(privilege, "MAX_SETTLED", 10)
    with pytest.raises(SandboxError, match="not copied out"):
        capped.release()
    assert os.path.ismount(root) and quota.is_capped(root)  # left mounted (nosuid), nothing replaced
    assert leftovers(root) == []
    forget(capped)
    assert recover_capped() == []  # a later start refuses it the same way
    assert os.path.ismount(root)
    monkeypatch.setattr(privilege, "MAX_SETTLED", 1000)
    assert root in recover_capped()
    assert not os.path.ismount(root)
    assert not os.stat(root / "alias3").st_mode & SETID


# ---- recovery acts only on records twin wrote: a planted record never mounts another user's image --
def _as_other(*argv: str) -> None:
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    subprocess.run([*prefix, *argv], check=True, capture_output=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


@requires_mount
@pytest.mark.parametrize("planted", ["stage", "record"])
def test_a_record_another_user_planted_is_never_acted_on(planted):
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="twin-quota-plant-", dir="/tmp"))  # reachable by the other user
    try:
        os.chmod(top, 0o755)
        public = top / "vartmp"
        public.mkdir(mode=0o1777)
        os.chmod(public, 0o1777)
        target = top / "victim" / "target"
        target.mkdir(parents=True)
        (target / "root.txt").write_text("root's\n")
        stage = public / "twin-stage"
        if planted == "stage":  # the whole stage made by the other user before root's first twin
            _as_other("mkdir", "-m", "0711", str(stage))
            _as_other("mkdir", "-m", "0700", str(stage / "quota"))
        else:  # root's stage and records folder; one record folder (as if) left by another user
            stage.mkdir(mode=0o711)
            (stage / "quota").mkdir(mode=0o700)
            os.chmod(stage / "quota", 0o777)
        record = stage / "quota" / "q1"
        _as_other("mkdir", str(record))
        _as_other("mkdir", str(record / "content"))
        _as_other("sh", "-c", f"echo attacker > {record}/content/root.txt")
        _as_other("mkfs.ext4", "-q", "-F", "-d", str(record / "content"), str(record / "image.ext4"), "8M")
        for name, text in (("owner", "999999999 1"), ("origin", str(target)), ("kind", EXT4), ("state", "mounted")):
            _as_other("sh", "-c", f"printf '%s' '{text}' > {record}/{name}")
        if planted == "record":
            os.chmod(stage / "quota", 0o700)
        with pytest.MonkeyPatch.context() as patch:  # (as `own_stage`: undone before it is)
            patch.setenv("TWIN_STAGE_DIR", str(stage))
            assert recover_capped() == []
        assert not os.path.ismount(target)
        assert (target / "root.txt").read_text() == "root's\n"
        assert (record / "state").read_text() == "mounted"  # left as it was: not twin's to act on
    finally:
        subprocess.run(["umount", str(target)], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_a_root_whose_folder_was_moved_away_is_released_where_it_is_now(tmp_path, kind):
    """A scratch tree renamed aside for removal while its sandbox still ran (a stopped run)."""
    (tmp_path / "scratch").mkdir()
    root = make_tree(tmp_path / "scratch" / "work")
    capped = CappedRoot.mount(root, 16, kind)
    assert capped is not None
    (root / "late.txt").write_text("late\n")
    os.rename(tmp_path / "scratch", tmp_path / ".removing")
    capped.release()
    moved = tmp_path / ".removing" / "work"
    assert not os.path.ismount(moved) and (moved / "late.txt").read_text() == "late\n"
    assert not capped.record.exists()


@requires_mount
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_owners_root_moved_away_is_unmounted_where_it_is_now(tmp_path, kind):
    """A dead twin's scratch, set aside for removal while mounted: the next start finds its filesystem by
    its record (the tmpfs by its source name, the image by its loop device) and unmounts it."""
    (tmp_path / "scratch").mkdir()
    root = make_tree(tmp_path / "scratch" / "work")
    capped = CappedRoot.mount(root, 16, kind)
    assert capped is not None
    forget(capped)
    capped._close()
    os.rename(tmp_path / "scratch", tmp_path / ".removing")
    moved = tmp_path / ".removing" / "work"
    assert os.path.ismount(moved)
    recover_capped()
    assert not os.path.ismount(moved) and not capped.record.exists()
