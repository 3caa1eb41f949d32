"""The uid switch, staged mount sources, writable-root settling, and the seccomp filter."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ground.isolation import SANDBOX_GID, SANDBOX_UID, reachable
from ground.sandboxes import privilege
from ground.sandboxes.privilege import Staging, settle_writable, unprivileged_prefix
from ground.sandboxes.seccomp import compile_filter, docker_profile, filter_file

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root switches uids")


@as_root
def test_root_runs_sandboxes_through_setpriv_as_nobody():
    prefix = unprivileged_prefix()
    assert prefix[0].endswith("setpriv") and f"--reuid={SANDBOX_UID}" in prefix
    assert "--bounding-set=-all" in prefix and "--no-new-privs" in prefix


@as_root
def test_setpriv_missing_fails_closed(monkeypatch):
    monkeypatch.setattr(privilege.shutil, "which", lambda *a, **k: None)
    with pytest.raises(privilege.SandboxError, match="never run as host root"):
        unprivileged_prefix()


def test_reachable_follows_search_permission(tmp_path):
    closed = tmp_path / "closed"
    (closed / "inner").mkdir(parents=True)
    closed.chmod(0o700)
    open_ = tmp_path / "open"
    open_.mkdir()
    os.chmod(tmp_path, 0o711)
    if reachable(tmp_path / "x"):
        assert not reachable(closed / "inner") or os.stat(closed).st_uid == SANDBOX_UID
        assert reachable(open_ / "x")


@as_root
def test_unreachable_source_is_staged_on_a_neutral_path(tmp_path):
    secret = tmp_path / "closed" / "dir"
    secret.mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    staging = Staging()
    try:
        staged = staging.path(secret)
        assert staged != secret and str(tmp_path) not in str(staged) and reachable(staged)
        prefix = staging.prefix()
        assert prefix[0].endswith("unshare") and str(secret) in prefix and str(staged) in prefix
    finally:
        staging.close()
    assert not staged.exists()


def test_settle_strips_setid_bits_and_never_follows_links(tmp_path):
    root = tmp_path / "app"
    (root / "d").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("host file")
    victim.chmod(0o4755)
    (root / "suid").write_text("x")
    (root / "suid").chmod(0o6755)
    (root / "d").chmod(0o2775)
    (root / "link").symlink_to(victim)
    settle_writable(root)
    assert not os.stat(root / "suid").st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert not os.stat(root / "d").st_mode & stat.S_ISGID
    assert os.stat(victim).st_mode & stat.S_ISUID, "a file outside, reached by a link, is untouched"
    if os.geteuid() == 0:
        assert os.stat(root / "suid").st_uid == SANDBOX_UID
        assert os.stat(victim).st_uid == 0
        assert os.lstat(root / "link").st_uid == SANDBOX_UID


@as_root
def test_settle_leaves_a_hard_link_to_a_host_file_alone(tmp_path):
    root = tmp_path / "app"
    root.mkdir()
    host = tmp_path / "host"
    host.write_text("x")
    os.link(host, root / "alias")
    settle_writable(root)
    assert os.stat(host).st_uid == 0


@pytest.mark.parametrize("profile", ["strict", "nested", "confined"])
def test_seccomp_filter_compiles_and_is_cached(tmp_path, profile):
    program = compile_filter(profile)
    assert program and len(program) % 8 == 0  # sock_filter entries
    path = filter_file(profile, tmp_path)
    assert path.read_bytes() == program and filter_file(profile, tmp_path) == path


def test_docker_profile_denies_the_same_calls():
    strict = json.loads(docker_profile("strict"))
    nested = json.loads(docker_profile("nested"))
    denied = set(strict["syscalls"][0]["names"])
    assert {"keyctl", "io_uring_setup", "bpf", "ptrace", "mount"} <= denied
    assert "mount" not in nested["syscalls"][0]["names"] and "keyctl" in nested["syscalls"][0]["names"]
    assert any(rule["names"] == ["unshare", "clone"] for rule in strict["syscalls"])
    confined = json.loads(docker_profile("confined"))
    assert set(confined["syscalls"][0]["names"]) == denied | {"memfd_create"}
    assert "memfd_create" not in denied


def test_stale_staging_is_swept_and_a_live_sandbox_recreates_its_points(tmp_path):
    from ground.sandboxes.privilege import sweep_stale_staging

    old, fresh = tmp_path / "sold", tmp_path / "sfresh"
    (old / "0").mkdir(parents=True)
    fresh.mkdir()
    os.utime(old, (0, 0))
    sweep_stale_staging(tmp_path, max_age_s=3600)
    assert not old.exists() and fresh.exists()
    if os.geteuid() == 0:
        closed = tmp_path / "closed" / "dir"
        closed.mkdir(parents=True)
        (tmp_path / "closed").chmod(0o700)
        staging = Staging()
        try:
            point = staging.path(closed)
            point.rmdir()
            assert str(point) in staging.prefix() and point.is_dir()
        finally:
            staging.close()


def test_staged_noexec_roots_and_tmpfs_come_after_the_binds(tmp_path, monkeypatch):
    staging = Staging()
    try:
        point = staging.tmpfs("size=1024,noexec")
        staging.noexec(tmp_path)
        prefix = staging.prefix()
        assert prefix[-6:] == ["tmpfs", "size=1024,noexec", str(point), "noexec", str(tmp_path), "--"]
        assert point.is_dir() and ("--user" in prefix) == (os.geteuid() != 0)
        monkeypatch.setattr(privilege, "dropping_root", lambda: False)
        # twin not root: the mounts are made in a user namespace mapping twin's uid to 0, and
        # bubblewrap is told to give commands twin's own uid and gid back
        assert staging.prefix()[1:3] == ["--user", "--map-root-user"]
        assert staging.bwrap_identity() == ["--uid", str(os.getuid()), "--gid", str(os.getgid())]
    finally:
        staging.close()
    assert not point.exists()
    assert Staging().prefix() == [] and Staging().bwrap_identity() == []


_LOAD_HANDED = r"""
import ctypes, os, shutil, sys
print("uid", os.getuid())
for path in (sys.argv[1], "/tmp/copy.so"):
    if path.startswith("/tmp"):
        shutil.copy(sys.argv[1], path)
    try:
        ctypes.CDLL(path)
        print("LOADED", path)
    except OSError:
        print("refused", path)
"""


@as_root
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs bubblewrap")
@pytest.mark.parametrize("confined", [True, False])
def test_an_unprivileged_twin_gets_the_same_noexec_mounts(monkeypatch, confined):
    """Run as an ordinary user (the sandbox uid stands in for one), the launcher still mounts the
    handed root and /tmp noexec, in a user namespace of its own, and commands keep that user's uid.
    The control (`confined` False: bubblewrap's own /tmp, a plain bind) loads the same library."""
    import importlib.util
    import subprocess

    from ground.isolation import scratch_dir

    spec = importlib.util.find_spec("torch")
    library = Path(spec.origin).parent / "lib" / "libc10.so" if spec and spec.origin else None
    if library is None or not library.is_file():
        pytest.skip("needs torch's libc10.so on the host")
    handed = scratch_dir("twin-handed-")
    shutil.copy(library, handed / "libc10.so")
    (handed / "libc10.so").chmod(0o644)
    monkeypatch.setattr(privilege, "dropping_root", lambda: False)
    staging = Staging()
    try:
        if confined:
            tmp = ["--bind", str(staging.tmpfs("size=67108864,mode=0755,nosuid,nodev,noexec")), "/tmp"]
            staging.noexec(handed)
            assert staging.bwrap_identity() == ["--uid", str(os.getuid()), "--gid", str(os.getgid())]
        else:
            tmp = ["--tmpfs", "/tmp"]
        identity = ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]  # the stand-in user's own
        bwrap = ["bwrap", *identity, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc"]
        bwrap += ["--dev", "/dev", *tmp, "--ro-bind", str(handed), "/mnt"]
        argv = [*unprivileged_prefix(), *staging.prefix(), *bwrap, "--", "/usr/bin/python3", "-c", _LOAD_HANDED]
        argv.append("/mnt/libc10.so")
        seen = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        staging.close()
        shutil.rmtree(handed)
    assert seen.returncode == 0, seen.stderr
    assert f"uid {SANDBOX_UID}" in seen.stdout
    assert seen.stdout.count("refused" if confined else "LOADED") == 2, seen.stdout


STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")


def _status(argv: list[str]) -> dict[str, str]:
    import subprocess

    seen = subprocess.run([*argv, "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in seen.splitlines() if ":" in line)
    return {key: " ".join(fields[key].split()) for key in STATUS_FIELDS}


@as_root
def test_the_quicker_switch_leaves_exactly_what_setpriv_leaves():
    quick = privilege.unprivileged_exec("/bin/cat")
    assert _status(quick) == _status([*unprivileged_prefix(), "/bin/cat"])
    status = _status(quick)
    assert status["Uid"] == " ".join([str(SANDBOX_UID)] * 4) and status["Groups"] == ""
    assert status["CapBnd"] == status["CapPrm"] == status["CapAmb"] == "0" * 16 and status["NoNewPrivs"] == "1"


@as_root
def test_without_capsh_the_switch_is_setpriv(monkeypatch):
    privilege._capsh_switch.cache_clear()
    real = privilege.shutil.which
    monkeypatch.setattr(privilege.shutil, "which", lambda name, **kw: None if name == "capsh" else real(name, **kw))
    try:
        argv = privilege.unprivileged_exec("/usr/bin/bwrap")
        assert argv[0].endswith("setpriv") and argv[-1] == "/usr/bin/bwrap"
    finally:
        privilege._capsh_switch.cache_clear()


@as_root
def test_a_capsh_that_leaves_a_capability_is_not_used(monkeypatch):
    import subprocess

    privilege._capsh_switch.cache_clear()
    real = subprocess.run

    def leaves_bounding_set(argv, **kwargs):
        done = real(argv, **kwargs)
        done.stdout = done.stdout.replace("CapBnd:\t0000000000000000", "CapBnd:\t0000000000000400")
        return done

    monkeypatch.setattr(privilege.subprocess, "run", leaves_bounding_set)
    try:
        if privilege.shutil.which("capsh", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            pytest.skip("no capsh here")
        assert privilege._capsh_switch() is None
        assert privilege.unprivileged_exec("/bin/true")[0].endswith("setpriv")
    finally:
        privilege._capsh_switch.cache_clear()


def test_settle_says_whether_it_walked_the_whole_tree(tmp_path):
    root = tmp_path / "app"
    (root / "d").mkdir(parents=True)
    for i in range(6):
        (root / "d" / f"f{i}").write_text("x")
    assert settle_writable(root, max_entries=7) is True
    assert settle_writable(root, max_entries=6) is False
    assert settle_writable(tmp_path / "absent") is True
