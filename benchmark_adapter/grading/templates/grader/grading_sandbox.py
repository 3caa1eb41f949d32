"""The candidate's sandbox of the shared grading library: nested bubblewrap, or a dropped uid.

Part of the grading library (`grading.py` is its face and documents it): how the grader keeps
the candidate's run away from its own files. Standard library only; every task carries an
identical copy beside `grading.py`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

_BWRAP_VARIANT: list[list[str]] = []  # cached namespace flags that work on this machine
NESTED_TMP_BYTES = 512 * 1024 * 1024


class IsolationUnavailable(RuntimeError):
    """The nested sandbox the candidate must run in cannot be built here (the grade fails)."""


def _nested_sandbox_unavailable(forbidden: list[str], assets_dir, app_mount: str, assets_mount: str) -> str | None:
    if _bwrap_flags() is None:
        why = uid_fallback_unavailable()
        if why is None:
            return None  # run_candidate drops the candidate to CANDIDATE_UID (a default Docker container)
        return (
            "the candidate's nested sandbox (bubblewrap with its own user, PID and network namespaces) "
            f"cannot start, and no uid drop is possible either: {why}"
        )
    scratch = Path(tempfile.mkdtemp(prefix="t2j-preflight-"))
    try:
        (scratch / "app").mkdir()
        (scratch / "scratch").mkdir()
        argv = _bwrap_argv(scratch / "app", assets_dir, scratch / "scratch", forbidden, app_mount, assets_mount)
        argv += ["--chdir", "/scratch", sys.executable, "-c", "import numpy"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/scratch", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1"}
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=120, env=env, cwd=str(scratch))
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the candidate's nested sandbox did not start: {exc}"
        if proc.returncode != 0:
            _BWRAP_VARIANT[:] = [[]]  # nor will run_candidate use it
            tail = proc.stderr.decode("utf-8", "replace").strip()[-300:]
            return f"the candidate's nested sandbox did not start (exit {proc.returncode}): {tail}"
        return None
    finally:
        remove_scratch(scratch)


def remove_scratch(scratch: Path) -> None:
    """Remove a scratch directory the candidate wrote into, at any depth."""
    try:
        shutil.rmtree(scratch, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(scratch)], check=False)


HARBOR_FOLDERS = ("/tests", "/logs/verifier")  # where Harbor copies them into the container


def in_container() -> bool:
    """Whether the grader runs in a container (Docker, Podman), where its folders are its own copies:
    only there, and only at Harbor's paths, does it close them to others; elsewhere they may be the
    task's own files."""
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


def _drop_privileges(uid: int = 0) -> None:
    uid = uid or CANDIDATE_UID
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


@contextlib.contextmanager
def candidate_uid() -> Iterator[int]:
    """A uid of `CANDIDATE_UIDS` that no other run holds, for one candidate run under the uid drop.

    Runs a grader makes at the same time (threads) each get their own uid, so that ending one
    run's processes never touches another's and no run can enter another's scratch folder.
    Every process of the uid is ended before it is handed out and when it is given back.
    """
    with _FREE_UIDS_CHANGED:
        while not _FREE_UIDS:
            _FREE_UIDS_CHANGED.wait()
        uid = _FREE_UIDS.pop()
    try:
        end_candidate_session(uid)  # nothing of an earlier run is alive while root fills the scratch
        yield uid
    finally:
        try:
            end_candidate_session(uid)
        finally:
            with _FREE_UIDS_CHANGED:
                _FREE_UIDS.append(uid)
                _FREE_UIDS.sort()
                _FREE_UIDS_CHANGED.notify()


def end_candidate_session(uid: int) -> None:
    """Kill every process of `uid`: the uid drop's session boundary.

    A run under the dropped uid may leave processes behind (`setsid`, a double fork); none may
    live on into the next run or into the grader's own steps. A child dropped to that uid sends
    SIGKILL to every process it may signal (`kill(-1)`: all of that uid in this PID namespace,
    never root's). The kernel does that under the task list's lock and a process with a pending
    SIGKILL cannot fork, so a fork bomb cannot outrun it. Nothing to do when not root (no drop).
    """
    if os.geteuid() != 0:
        return
    pid = os.fork()
    if pid == 0:  # the child: only system calls until _exit (another thread may hold a lock)
        code = 1
        try:
            _drop_privileges(uid)
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass  # none left
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise IsolationUnavailable(f"the candidate's processes (uid {uid}) could not be ended")
    # SIGKILL is sent, not yet taken: a process dies when the kernel next schedules it. The boundary
    # holds once none is left running (zombies run nothing), so wait for that, on a deadline.
    deadline = time.monotonic() + SESSION_END_S
    while (left := _running_as(uid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    if left:
        raise IsolationUnavailable(f"{left} process(es) of the candidate (uid {uid}) outlived SIGKILL for {SESSION_END_S:g} s")


SESSION_END_S = 30.0
"""How long the processes of an ended candidate run may take to die after SIGKILL."""


def _running_as(uid: int) -> int:
    """How many processes whose real, effective or saved uid is `uid` are not yet zombies (this PID namespace)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as fh:
                fields = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
        except OSError:
            continue  # gone meanwhile
        uids = {int(u) for u in fields.get("Uid", "").split()[:3]}
        count += uid in uids and not fields.get("State", "").strip().startswith(("Z", "X"))
    return count


def hand_scratch_to_candidate(scratch: Path, uid: int) -> None:
    """Give the scratch folder root has filled to `uid`, through descriptors only.

    Called before the folder is open to anyone but root (`mkdtemp`'s 0700) and after every
    process of the uid has ended, so nothing in it can be a link the candidate planted; even
    so no link is followed (`fchownat` with AT_SYMLINK_NOFOLLOW, the folder by its own
    descriptor, opened O_NOFOLLOW). The folder becomes the candidate's (0700) only at the end.
    """
    top = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for _folder, dirs, files, dir_fd in os.fwalk(dir_fd=top, follow_symlinks=False):
            for name in dirs + files:
                os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
        os.fchown(top, uid, uid)
        os.fchmod(top, 0o700)
    finally:
        os.close(top)


def _choose_isolation(requested: str) -> str:
    if requested not in ("auto", "bwrap", "uid", "none"):
        raise ValueError(f"unknown isolation {requested!r}")
    if requested in ("uid", "none"):
        return requested
    if _bwrap_flags() is None:
        why = uid_fallback_unavailable() if requested == "auto" else "bwrap was asked for by name"
        if why is None:
            return "uid"
        raise IsolationUnavailable(
            "the candidate's sandbox (bubblewrap with its own user, PID and network namespaces "
            f"and /proc) cannot be started here, nor a uid drop ({why}); refusing a weaker one"
        )
    return "bwrap"


CANDIDATE_UID = CANDIDATE_GID = 65532  # neither root nor the uid twin's sandboxes run as (65534)
# One uid (and gid) per candidate run at the same time; the first is the one checked below: the others
# are, like it, in no group and own nothing, so what it can reach they can.
CANDIDATE_UIDS = tuple(range(CANDIDATE_UID, CANDIDATE_UID - 8, -1))
_FREE_UIDS = sorted(CANDIDATE_UIDS)  # pop() hands out the highest free one
_FREE_UIDS_CHANGED = threading.Condition()
_UID_FALLBACK: list[str | None] = []  # cached answer of uid_fallback_unavailable
_UID_PROBE = r"""
import os, sys
logs, closed = sys.argv[1], sys.argv[2:]
if logs and (os.access(logs, os.W_OK) or os.access(logs, os.X_OK)):  # closed: no reward.json to replace
    print("reachable: " + logs); sys.exit(3)
for root in closed:  # not even traversable: a file reached by its (known) name is as bad as a listed one
    if os.access(root, os.X_OK) or os.access(root, os.R_OK):
        print("reachable: " + root); sys.exit(3)
import numpy
"""


def uid_fallback_unavailable(protect: Iterable[str | Path] | None = None) -> str | None:
    """Why the candidate cannot run under a dropped uid here (None: it can), where bwrap cannot start.

    In a default Docker container (root, Docker's seccomp profile, no user namespaces), as
    Harbor runs graders, the candidate's side runs as `CANDIDATE_UID` with no groups and no
    capabilities instead; the network is the container's (Harbor tasks set
    `allow_internet = false`). That is only allowed when a child dropped to that uid can
    neither enter this `tests/` folder (not even to open a file by its name) nor enter
    `$LOGS_DIR`, and can still import numpy; the grader first closes those folders to
    others where it runs in a container. `protect` overrides the folders
    that must stay closed (tests).
    """
    if protect is None and _UID_FALLBACK:
        return _UID_FALLBACK[0]
    closed = [Path(p) for p in (protect or [Path(__file__).resolve().parent])]
    logs = os.environ.get("LOGS_DIR", "")
    why = _uid_fallback_check(Path(logs) if logs and Path(logs).is_dir() else None, [r for r in closed if r.exists()])
    if protect is None:
        _UID_FALLBACK.append(why)
    return why


def _uid_fallback_check(logs: Path | None, closed: list[Path]) -> str | None:
    if os.geteuid() != 0:
        return "the grader is not root, so it cannot run the candidate as another uid"
    for root in [*closed, *([logs] if logs else [])]:
        try:
            if str(root) in HARBOR_FOLDERS and in_container():  # whoever owns them on the host
                os.chmod(root, 0o700)  # Harbor's /tests and /logs/verifier: the grader's alone
        except OSError:
            pass  # a read-only mount: what the check below finds decides
    argv = [sys.executable, "-c", _UID_PROBE, str(logs or ""), *map(str, closed)]
    try:
        proc = subprocess.run(argv, capture_output=True,
                              timeout=60, preexec_fn=_drop_privileges, cwd="/")  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"a child cannot drop to uid {CANDIDATE_UID}: {exc}"
    if proc.returncode == 3:
        return f"uid {CANDIDATE_UID} could reach the grader's files ({proc.stdout.decode(errors='replace').strip()})"
    if proc.returncode != 0:
        return f"the interpreter does not run as uid {CANDIDATE_UID}: {proc.stderr.decode(errors='replace')[-200:]}"
    return None


def _unprivileged_python_works() -> bool:
    """Whether the interpreter (and numpy) can run as nobody (root-only installs cannot)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import numpy"],
            capture_output=True,
            timeout=60,
            preexec_fn=_drop_privileges,
            cwd="/",
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _bwrap_flags() -> list[str] | None:
    """Namespace flags of the candidate's sandbox, or None where bwrap cannot build it.

    Every variant has its own user, PID, network, IPC and UTS namespaces and its own
    /proc; the first also disables further user namespaces (bwrap >= 0.8). There is no
    weaker variant: without a PID namespace the candidate would reach the grader's
    files through /proc/<pid>/root.
    """
    if _BWRAP_VARIANT:
        return _BWRAP_VARIANT[0] or None
    full = ["--unshare-all", "--unshare-user", "--proc", "/proc", "--cap-drop", "ALL"]
    variants = [[*full, "--disable-userns"], full]
    if shutil.which("bwrap") is None:
        _BWRAP_VARIANT.append([])
        return None
    for flags in variants:
        argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", *flags, "--die-with-parent", "true"]
        try:
            ok = subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            _BWRAP_VARIANT.append(flags)
            return flags
    _BWRAP_VARIANT.append([])
    return None


def _python_roots() -> list[Path]:
    """Directories the interpreter needs: its prefixes and every existing sys.path root."""
    roots = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent)
    for entry in sys.path:
        # only package directories: sys.path[0] is the grader's own folder and must stay unseen
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            roots.add(Path(os.path.realpath(entry)))
    # keep only outermost roots
    ordered = sorted(roots, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for root in ordered:
        if not any(k == root or k in root.parents for k in kept):
            kept.append(root)
    return kept


def _bwrap_argv(
    app_dir: Path,
    assets_dir: str | Path | None,
    scratch: Path,
    forbidden: list[str],
    app_mount: str,
    assets_mount: str,
) -> list[str]:
    flags = _bwrap_flags() or []
    argv = ["bwrap", "--die-with-parent", "--new-session", *flags, "--dev", "/dev"]
    argv += ["--size", str(NESTED_TMP_BYTES), "--tmpfs", "/tmp"]
    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"):
        if os.path.exists(system):
            argv += ["--ro-bind", system, system]
    for root in _python_roots():
        argv += ["--ro-bind", str(root), str(root)]
    argv += _mask_forbidden(forbidden)
    argv += ["--ro-bind", str(app_dir.resolve()), app_mount]
    if assets_dir is not None and Path(assets_dir).exists():
        argv += ["--ro-bind", str(Path(assets_dir).resolve()), assets_mount]
    argv += ["--bind", str(scratch), "/scratch"]
    return argv


def _mask_forbidden(forbidden: list[str]) -> list[str]:
    """Re-create each site directory holding a forbidden package without it (physically absent)."""
    args: list[str] = []
    seen: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        site = os.path.realpath(entry)
        if site in seen:
            continue
        seen.add(site)
        names = os.listdir(site)
        if not any(_is_forbidden(n, forbidden) for n in names):
            continue
        args += ["--tmpfs", site]
        for name in sorted(names):
            if not _is_forbidden(name, forbidden):
                args += ["--ro-bind", os.path.join(site, name), os.path.join(site, name)]
    return args


def _is_forbidden(name: str, forbidden: list[str]) -> bool:
    """A site-packages entry that belongs to a forbidden package (or its bundled helpers)."""
    stem = name.lower().split("-")[0].split(".")[0]
    aliases = set(forbidden)
    if "torch" in aliases:
        aliases |= {"functorch", "torchgen"}
    return stem in aliases
