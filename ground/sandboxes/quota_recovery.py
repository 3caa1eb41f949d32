"""Bringing a capped root (`quota`) back to a plain directory from whichever step its record reached.

`CappedRoot.release` ends here, and so does `recover_capped()`, run when twin starts, for the
roots of a twin that was killed. Each acts as root on the place a record names (unmounts,
renames, copies): only on records twin's user alone wrote (`quota_records`), and only at an
origin that is a place twin puts a root (`quota_records.origin_refusal`): never '/', a
relative or unnormalized path, or a folder twin sets a tree aside in.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

from ground.agent_tree import discard_tree
from ground.host_dirs import IsolationError, is_ours
from ground.sandbox import SandboxError
from ground.sandboxes import quota_records as records
from ground.sandboxes.host_disk import sync_filesystem
from ground.sandboxes.privilege import MAX_SETTLED, settle_writable
from ground.sandboxes.quota_records import EXT4

log = logging.getLogger(__name__)
REMOUNT_S = 10.0
"""How long a record's image is tried again when it will not mount (a lazily unmounted one is freed late)."""
TOOLS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# Modes come over by the umask of 0 (`run_tool`), never by --preserve=mode: cp then leaves out setuid and
# setgid bits, and it copies no extended attribute (no file capability), whatever the walks did.
COPY_TREE = ("cp", "-dR", "--preserve=ownership,timestamps,links", "--")


def recover_capped() -> list[Path]:
    """Release the capped roots of processes that are gone (a killed twin); run when twin starts.

    Only records twin wrote are acted on: the records' folder and each record must be this
    user's alone (`host_dirs.trusted_subdir`, `is_ours`); a stage another user could have made
    is left alone here (the next sandbox refuses it in one line).
    """
    try:
        base = records.records_dir()
        entries = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False) and is_ours(Path(e.path))]
    except (OSError, IsolationError) as exc:
        log.warning("capped roots a killed twin left are not looked for: %s", exc)
        return []
    for entry in entries:  # a record a killed twin never finished writing holds nothing to release
        draft = Path(entry.path)
        if entry.name.startswith(records.DRAFT) and not records.owner_running(draft) and records.age_s(draft) > 600:
            discard_tree(draft)
    done = []
    for record in [Path(e.path) for e in entries if e.name.startswith("q")]:
        if records.owner_running(record):
            continue
        origin = records.read_field(record, "origin")
        try:
            recover_record(record)
        except (OSError, subprocess.CalledProcessError, SandboxError) as exc:
            log.warning("cannot release the capped root %s a killed twin left: %s", origin, why_failed(exc))
            continue
        if origin:
            done.append(Path(origin))
    return done


def recover_record(record: Path) -> None:
    """Bring the root of `record` back to a plain directory, from whichever step was reached.

    `in`: the copy in did not finish, the original is aside: unmount and put it back.
    `mounted`: the filesystem holds the tree: copy it out beside the root, then as `out`.
    `out`: the copy out is complete: unmount, swap it in. Then the record (and image) goes;
    it goes at once where the folder that held the root is gone (its scratch was removed).

    Raises:
        SandboxError: the record names no place twin puts a root ('/', a relative or
            unnormalized path: `quota_records.origin_refusal`); nothing there is touched, and
            the record goes if it is twin's own.
    """
    origin = records.read_field(record, "origin")
    if not origin:
        discard_tree(record)
        return
    refused = records.origin_refusal(origin)
    if refused is not None:
        if is_ours(record):
            discard_tree(record)
        raise SandboxError(f"the capped-root record {record.name} names {origin!r} ({refused}): not acted on")
    path = Path(origin)
    if not path.parent.is_dir():  # the tree the root lay in was removed since: nothing to put back
        for point in records.mounted_at(record):  # but its filesystem may still be mounted where it was moved
            _unmount(point)
        discard_tree(record)
        return
    state = records.read_field(record, "state")
    image = record / "image.ext4"
    if state == "in":
        aside = sibling(path, "in")
        if aside.is_dir():  # else the tree was never set aside: what is mounted at `path` is not this record's
            _unmount(path)
            discard_tree(path)
            os.rename(aside, path)
    elif state in ("mounted", "out"):
        discard_tree(sibling(path, "in"))
        out = sibling(path, "out")
        if state == "mounted":
            if not os.path.ismount(path) and image.is_file() and is_ours(image):  # a reboot took the mount,
                _mount_again(image, path)  # or someone unmounted it
            discard_tree(out)
            if os.path.ismount(path):
                sync_filesystem(path)  # a write error met now: nothing is copied, nothing replaced
                if not settle_writable(path):  # fail closed: what a cut-short walk left is never copied out
                    raise SandboxError(
                        f"{path} holds more than {MAX_SETTLED} names: not copied out of its capped filesystem "
                        f"(left mounted); remove names from it, or unmount it and delete it"
                    )
                os.mkdir(out, 0o700)
                try:
                    run_tool(*COPY_TREE, f"{path}/.", f"{out}/")
                    # a candidate: on the host disk before it replaces anything (not per scratch tmpfs: a
                    if records.read_field(record, "kind") == EXT4:  # syncfs flushes the whole host filesystem)
                        sync_filesystem(out)
                except (OSError, subprocess.CalledProcessError):
                    discard_tree(out)  # a partial copy (the host full) is never swapped in
                    raise
                st = os.stat(path)
                out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:  # by its descriptor: the copy holds the candidate's entries, never a link followed
                    os.fchown(out_fd, st.st_uid, st.st_gid)
                    os.fchmod(out_fd, st.st_mode & 0o7777)
                finally:
                    os.close(out_fd)
            records.write_field(record, "state", "out")
        _unmount(path)
        if out.is_dir():
            discard_tree(path)
            os.rename(out, path)
        else:
            path.mkdir(exist_ok=True)  # a tmpfs lost with a reboot: its scratch is gone
    else:
        _unmount(path)
    discard_tree(record)


def _mount_again(image: Path, path: Path) -> None:
    """Mount a record's image at `path` again, once the kernel has let go of its last mount.

    A filesystem unmounted lazily (`umount -l`, by twin or anyone) is freed, and its loop
    device detached, only a while after its last user is gone: until then mounting the same
    image fails. So it waits until `REMOUNT_S` has passed for the image's loop device to go, and
    tries the mount again until then.
    """
    deadline = time.monotonic() + REMOUNT_S
    while _attached(image):  # never checked nor mounted twice while the kernel may still write it
        if time.monotonic() >= deadline:
            raise SandboxError(
                f"the capped filesystem of {path} was unmounted but is still in use (a process holds it): "
                f"a later twin command recovers it once that process is gone"
            )
        time.sleep(0.1)
    subprocess.run(["e2fsck", "-p", str(image)], capture_output=True, check=False, env=_env())
    path.mkdir(exist_ok=True)
    while True:
        try:
            run_tool("mount", "-o", "loop,nosuid,nodev", str(image), str(path))
            return
        except subprocess.CalledProcessError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(0.1)


def _attached(image: Path) -> bool:
    """Whether a loop device still has `image` as its backing file."""
    found = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True, env=_env())
    return bool(found.stdout.strip())


def _unmount(path: Path) -> None:
    """Unmount `path` if it is a mount point (detached lazily if a process still holds it)."""
    if not os.path.ismount(path):
        return
    if subprocess.run(["umount", str(path)], capture_output=True, env=_env()).returncode != 0:
        run_tool("umount", "-l", str(path))


def sibling(path: Path, step: str) -> Path:
    """Where a root's tree waits beside it during a step (`in`: the original set aside, `out`: the copy out)."""
    return path.with_name(f".{path.name}.twin-{step}")


def run_tool(*argv: str) -> None:
    """Run a system tool (mount, cp, ...) on the fixed PATH, with a umask of 0; a failure raises."""
    subprocess.run(list(argv), check=True, capture_output=True, env=_env(), umask=0)


def _env() -> dict[str, str]:
    return {"PATH": TOOLS_PATH, "LANG": "C"}


def why_failed(exc: BaseException) -> str:
    """A failed step in one line: the tool and the last line it printed, or the error."""
    if isinstance(exc, subprocess.CalledProcessError):
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"{exc.cmd[0]}: {detail[-1] if detail else f'exit {exc.returncode}'}"
    return str(exc)
