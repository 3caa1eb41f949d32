"""Root trusts no stage directory another user could have made: links, foreign owners, open modes.

Every attacker's step runs as an unprivileged uid (`setpriv --reuid=65534`) in a folder laid out
like `/var/tmp` (root's, sticky, writable by all); the stage is pointed there, never at the
host's own `/var/tmp/twin-stage`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ground import host_dirs
from ground.host_dirs import IsolationError, cache_root, is_ours, read_ours, stage_root, trusted_subdir

OTHER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the attacks are on root's stage")


def as_other(*argv: str) -> None:
    """Run `argv` as another, unprivileged user (the attacker)."""
    prefix = ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "--"]
    subprocess.run([*prefix, *argv], check=True, capture_output=True)


@pytest.fixture
def public(monkeypatch):
    """(a `/var/tmp` of the test's own: root's, mode 1777; a victim folder of root's in it, mode 1777).

    Under `/tmp` (not pytest's 0700 folder), so that the other user can reach it.
    """
    top = Path(tempfile.mkdtemp(prefix="twin-host-dirs-", dir="/tmp"))
    os.chmod(top, 0o755)
    vartmp = top / "vartmp"
    vartmp.mkdir()
    os.chmod(vartmp, 0o1777)
    victim = top / "victim"
    victim.mkdir()
    os.chmod(victim, 0o1777)
    monkeypatch.delenv("TWIN_STAGE_DIR", raising=False)
    monkeypatch.setattr(host_dirs, "STAGE_DIR", str(vartmp / "twin-stage"))
    yield vartmp, victim
    subprocess.run(["umount", "-R", str(top)], capture_output=True)  # only if a test failed mid-mount
    shutil.rmtree(top, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@as_root
def test_a_stage_root_is_made_root_s_own_0711_below_a_sticky_folder(public):
    vartmp, _victim = public
    made = stage_root()
    assert made == vartmp / "twin-stage"
    assert os.lstat(made).st_uid == 0 and mode(made) == 0o711
    assert mode(vartmp) == 0o1777  # the sticky folder above is never changed
    assert stage_root() == made  # and found again


@as_root
def test_a_link_planted_at_the_stage_is_refused_and_never_followed(public):
    vartmp, victim = public
    as_other("ln", "-s", str(victim), str(vartmp / "twin-stage"))
    with pytest.raises(IsolationError, match=r"twin-stage is a link or not a folder: .*remove"):
        stage_root()
    assert mode(victim) == 0o1777 and list(victim.iterdir()) == []


@as_root
def test_a_folder_another_user_made_at_the_stage_is_refused(public):
    vartmp, _victim = public
    as_other("mkdir", "-m", "0711", str(vartmp / "twin-stage"))
    with pytest.raises(IsolationError, match=rf"twin-stage belongs to uid {OTHER}: .*remove .*twin-stage"):
        stage_root()
    assert os.lstat(vartmp / "twin-stage").st_uid == OTHER and mode(vartmp / "twin-stage") == 0o711


@as_root
def test_a_stage_root_others_can_write_is_refused_not_changed(public, monkeypatch):
    vartmp, victim = public
    monkeypatch.setenv("TWIN_STAGE_DIR", str(victim))  # root's, but 1777: e.g. TWIN_STAGE_DIR=/tmp
    with pytest.raises(IsolationError, match="can be written by group or others"):
        stage_root()
    assert mode(victim) == 0o1777


@as_root
def test_a_folder_above_the_stage_that_another_user_owns_is_refused(public, monkeypatch):
    vartmp, _victim = public
    as_other("mkdir", str(vartmp / "mine"))
    monkeypatch.setenv("TWIN_STAGE_DIR", str(vartmp / "mine" / "stage"))
    with pytest.raises(IsolationError, match=rf"mine belongs to uid {OTHER}: .*TWIN_STAGE_DIR"):
        stage_root()
    assert not (vartmp / "mine" / "stage").exists()


@as_root
def test_records_are_trusted_only_when_root_s_alone(public, monkeypatch):
    vartmp, _victim = public
    monkeypatch.setenv("TWIN_STAGE_DIR", str(vartmp.parent / "stage"))
    base = stage_root()
    quota = trusted_subdir(base, "quota")
    assert mode(quota) == 0o700 and is_ours(quota)
    (quota / "r").write_text("/some/origin\n")
    assert read_ours(quota / "r") == "/some/origin"
    os.chown(quota / "r", OTHER, OTHER)
    assert read_ours(quota / "r") == "" and not is_ours(quota / "r")
    os.chmod(quota, 0o750)
    with pytest.raises(IsolationError, match="quota is open to group or others"):
        trusted_subdir(base, "quota")
    shutil.rmtree(base / "quota")
    os.symlink(vartmp, base / "quota")
    with pytest.raises(IsolationError, match="quota is a link"):
        trusted_subdir(base, "quota")


@pytest.fixture
def fresh_cache_checks(monkeypatch):
    """No cache root checked before this test (the check is remembered per process)."""
    monkeypatch.setattr(host_dirs, "_trusted_caches", {})


@as_root
def test_root_s_cache_is_made_root_s_own_below_a_sticky_folder(public, monkeypatch, fresh_cache_checks):
    vartmp, _victim = public
    monkeypatch.setenv("TWIN_CACHE_DIR", str(vartmp / "twin-cache"))
    made = cache_root()
    assert made == vartmp / "twin-cache"
    assert os.lstat(made).st_uid == 0 and mode(made) & 0o022 == 0
    assert mode(vartmp) == 0o1777 and cache_root() == made


@as_root
def test_the_default_cache_is_checked_too(public, monkeypatch, fresh_cache_checks):
    vartmp, _victim = public
    monkeypatch.delenv("TWIN_CACHE_DIR", raising=False)
    as_other("mkdir", "-m", "0755", str(vartmp / "cache"))
    monkeypatch.setattr(host_dirs, "CACHE_DIR", str(vartmp / "cache"))
    with pytest.raises(IsolationError, match=rf"cache belongs to uid {OTHER}: .*TWIN_CACHE_DIR"):
        cache_root()


@as_root
def test_a_link_planted_at_the_cache_is_refused_and_never_followed(public, monkeypatch, fresh_cache_checks):
    vartmp, victim = public
    as_other("ln", "-s", str(victim), str(vartmp / "twin-cache"))
    monkeypatch.setenv("TWIN_CACHE_DIR", str(vartmp / "twin-cache"))
    with pytest.raises(IsolationError, match=r"twin-cache is a link or not a folder: .*remove .*TWIN_CACHE_DIR"):
        cache_root()
    assert mode(victim) == 0o1777 and list(victim.iterdir()) == []


@as_root
def test_a_cache_another_user_owns_is_refused(public, monkeypatch, fresh_cache_checks):
    vartmp, _victim = public
    as_other("mkdir", "-m", "0755", str(vartmp / "twin-cache"))
    monkeypatch.setenv("TWIN_CACHE_DIR", str(vartmp / "twin-cache"))
    with pytest.raises(IsolationError, match=rf"twin-cache belongs to uid {OTHER}"):
        cache_root()


@as_root
def test_a_cache_others_can_write_is_refused_not_changed(public, monkeypatch, fresh_cache_checks):
    _vartmp, victim = public
    monkeypatch.setenv("TWIN_CACHE_DIR", str(victim))  # root's, but 1777: e.g. TWIN_CACHE_DIR=/tmp
    with pytest.raises(IsolationError, match=r"can be written by group or others: .*TWIN_CACHE_DIR.*0755"):
        cache_root()
    assert mode(victim) == 0o1777


@as_root
@pytest.mark.parametrize("owner", [0, OTHER])
def test_a_cache_under_a_folder_another_user_can_write_is_refused(public, monkeypatch, fresh_cache_checks, owner):
    """Under a folder of another user's, or one of root's that others can write and is not sticky."""
    vartmp, _victim = public
    above = vartmp / "shared"
    above.mkdir()
    os.chown(above, owner, owner)
    os.chmod(above, 0o777 if owner == 0 else 0o755)
    monkeypatch.setenv("TWIN_CACHE_DIR", str(above / "cache"))
    expected = "can be written by group or others" if owner == 0 else f"belongs to uid {OTHER}"
    with pytest.raises(IsolationError, match=rf"shared {expected}: .*set TWIN_CACHE_DIR"):
        cache_root()
    assert not (above / "cache").exists()


@as_root
def test_a_cache_refused_is_one_error_line_from_twin(public, tmp_path):
    """Any twin command that needs the cache refuses in one line, exit 2, before it writes anything."""
    vartmp, _victim = public
    as_other("mkdir", "-m", "0755", str(vartmp / "twin-cache"))
    env = {**os.environ, "TWIN_CACHE_DIR": str(vartmp / "twin-cache"), "TWIN_STAGE_DIR": str(tmp_path / "stage")}
    task = Path(__file__).resolve().parents[2] / "tasks" / "t2j-mini" / "mlp-train"
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "task", "check", str(task)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"twin-cache belongs to uid {OTHER}" in lines[0], done.stderr
    assert list((vartmp / "twin-cache").iterdir()) == []


@as_root
def test_a_relative_cache_is_checked_where_it_lies_and_kept_as_checked(public, monkeypatch, fresh_cache_checks):
    """`TWIN_CACHE_DIR=twin-cache` is the folder of that name where twin started, checked there, and stays that
    folder for the process (a later change of directory does not move it)."""
    vartmp, victim = public
    as_other("mkdir", "-m", "0755", str(vartmp / "planted"))
    monkeypatch.chdir(vartmp)
    monkeypatch.setenv("TWIN_CACHE_DIR", "planted")
    with pytest.raises(IsolationError, match=rf"planted belongs to uid {OTHER}"):
        cache_root()
    monkeypatch.setenv("TWIN_CACHE_DIR", "twin-cache")
    made = cache_root()
    assert made == vartmp / "twin-cache" and made.is_absolute()
    monkeypatch.chdir(victim)
    assert cache_root() == made and not (victim / "twin-cache").exists()


@as_root
def test_a_cache_reached_through_a_link_of_another_user_s_stays_where_it_was_checked(
    public, monkeypatch, fresh_cache_checks
):
    """A link above the cache is resolved once; swapping it after the check moves nothing twin uses."""
    vartmp, victim = public
    (vartmp / "root-s").mkdir(mode=0o755)
    as_other("ln", "-s", str(vartmp / "root-s"), str(vartmp / "link"))
    monkeypatch.setenv("TWIN_CACHE_DIR", str(vartmp / "link" / "twin-cache"))
    made = cache_root()
    assert made == vartmp / "root-s" / "twin-cache"
    as_other("mkdir", "-m", "0755", str(vartmp / "theirs"))
    as_other("ln", "-sfn", str(vartmp / "theirs"), str(vartmp / "link"))
    assert cache_root() == made and list((vartmp / "theirs").iterdir()) == []


@as_root
def test_a_cache_named_with_dot_dot_below_another_user_s_folder_is_refused(public, monkeypatch, fresh_cache_checks):
    vartmp, _victim = public
    as_other("mkdir", "-m", "0755", str(vartmp / "theirs"))
    monkeypatch.setenv("TWIN_CACHE_DIR", str(vartmp / "theirs" / "sub" / ".."))
    with pytest.raises(IsolationError, match=rf"theirs belongs to uid {OTHER}"):
        cache_root()
    assert not (vartmp / "theirs" / "sub").exists()
