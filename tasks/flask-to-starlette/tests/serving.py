"""Serving the flask-to-starlette candidate in its nested sandbox (standard library only).

`serve_and_ask` serves the candidate with `uvicorn app:app` on a loopback port in a
bubblewrap sandbox where /tests, /logs and /source are absent and Flask and Werkzeug
are physically removed, and sends every case through `DRIVER`; what the run wrote is
read as regular files only. `nested_sandbox_unavailable` starts that very sandbox
once over an empty directory, before the candidate runs, and says why it cannot
start (the grader's own machinery failing: an infrastructure failure, never a score).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

FORBIDDEN = ("flask", "werkzeug")
OUTPUT_LIMIT = 64 << 20  # bytes of one file the candidate's run produced
_BWRAP_FLAGS: list[list[str] | None] = []

DRIVER = r'''
import http.client, json, os, socket, subprocess, sys, time, base64
config = json.load(open(sys.argv[1]))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
log = open(config["log"], "wb")
argv = config.get("server") or ["{python}", "-m", "uvicorn", "app:app", "--port", "{port}", "--log-level", "warning"]
argv = [a.replace("{python}", sys.executable).replace("{port}", str(port)) for a in argv]
server = subprocess.Popen(argv, cwd=config["app"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
answers = {}
try:
    deadline = time.monotonic() + config["startup_s"]
    up = False
    while time.monotonic() < deadline and server.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close(); up = True; break
        except OSError:
            time.sleep(0.05)
    for case in config["cases"] if up else []:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            body = case["body"].encode() if case.get("body") is not None else None
            conn.putrequest(case["method"], case["target"], skip_accept_encoding=True)
            headers = list(case.get("headers", []))
            if body is not None:
                headers.append(["Content-Length", str(len(body))])
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders(body)
            r = conn.getresponse(); data = r.read()
            answers[case["name"]] = {"status": r.status, "headers": r.getheaders(),
                                     "body": base64.b64encode(data).decode()}
        except Exception as exc:
            answers[case["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            conn.close()
finally:
    server.terminate()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
json.dump({"up": up, "answers": answers}, open(config["out"], "w"))
'''


def _bwrap_flags() -> list[str] | None:
    """Namespace flags of the candidate's sandbox, or None where bwrap cannot build it.

    Every variant has its own user, PID, network, IPC and UTS namespaces and its own
    /proc; the first also disables further user namespaces. There is no weaker variant:
    without a PID namespace the candidate would reach the grader's files through /proc.
    """
    if _BWRAP_FLAGS:
        return _BWRAP_FLAGS[0]
    full = ["--unshare-all", "--unshare-user", "--proc", "/proc", "--cap-drop", "ALL"]
    variants = [[*full, "--disable-userns"], full]
    found = None
    if shutil.which("bwrap"):
        for flags in variants:
            argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", *flags, "--die-with-parent", "true"]
            try:
                if subprocess.run(argv, capture_output=True, timeout=20).returncode == 0:
                    found = flags
                    break
            except (OSError, subprocess.TimeoutExpired):
                continue
    _BWRAP_FLAGS.append(found)
    return found


def _python_roots() -> list[Path]:
    roots = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent)
    for entry in sys.path:
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            roots.add(Path(os.path.realpath(entry)))
    kept: list[Path] = []
    for root in sorted(roots, key=lambda p: len(p.parts)):
        if not any(k == root or k in root.parents for k in kept):
            kept.append(root)
    return kept


def _forbidden_entry(name: str) -> bool:
    return name.lower().split("-")[0].split(".")[0] in FORBIDDEN


def _mask_forbidden() -> list[str]:
    """Re-create each site directory holding Flask or Werkzeug without them (physically absent)."""
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
        if not any(_forbidden_entry(n) for n in names):
            continue
        args += ["--tmpfs", site]
        for name in sorted(names):
            if not _forbidden_entry(name):
                args += ["--ro-bind", os.path.join(site, name), os.path.join(site, name)]
    return args


def _sandbox_argv(flags: list[str], app_dir: Path, scratch: Path) -> list[str]:
    """bwrap's arguments for the candidate's sandbox: the candidate at /app, the scratch at /scratch."""
    argv = ["bwrap", "--die-with-parent", "--new-session", *flags, "--dev", "/dev",
            "--size", str(512 * 1024 * 1024), "--tmpfs", "/tmp"]
    for system in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"):
        if os.path.exists(system):
            argv += ["--ro-bind", system, system]
    for root in _python_roots():
        argv += ["--ro-bind", str(root), str(root)]
    argv += _mask_forbidden()
    return argv + ["--ro-bind", str(app_dir), "/app", "--bind", str(scratch), "/scratch", "--chdir", "/app"]


def nested_sandbox_unavailable() -> str | None:
    """Why the candidate's sandbox cannot start here (None: it starts), asked before the candidate runs.

    It starts that very sandbox over an empty stand-in for the candidate and runs the
    interpreter in it, so the answer is the machine's, never the candidate's.
    """
    if os.environ.get("GRADER_ISOLATION") == "none":
        return None
    flags = _bwrap_flags()
    if flags is None:
        why = uid_fallback_unavailable()
        if why is None:
            return None  # a default Docker container, as Harbor runs graders: the candidate runs as CANDIDATE_UID
        return ("the candidate's sandbox (bubblewrap with its own PID namespace and /proc) cannot start here, "
                f"nor a uid drop: {why}")
    scratch = Path(tempfile.mkdtemp(prefix="bookshop-preflight-"))
    try:
        (scratch / "app").mkdir()
        argv = _sandbox_argv(flags, scratch / "app", scratch) + ["--", sys.executable, "-c", "pass"]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the candidate's sandbox did not start: {exc}"
        tail = proc.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"the candidate's sandbox did not start (exit {proc.returncode}): {tail}" if proc.returncode else None
    finally:
        remove_scratch(scratch)


def serve_and_ask(app_dir: Path, cases: list[dict], timeout_s: float) -> tuple[dict, str, str]:
    """Serve the candidate in a nested sandbox and send every case; returns (answers, isolation, log)."""
    scratch = Path(tempfile.mkdtemp(prefix="bookshop-grade-"))
    try:
        (scratch / "driver.py").write_text(DRIVER)
        flags = _bwrap_flags()
        drop = flags is None and os.environ.get("GRADER_ISOLATION") != "none"
        if drop and uid_fallback_unavailable() is not None:
            # fail closed: never serve the candidate where it could read the grader's files
            raise RuntimeError("the candidate's sandbox (bubblewrap with its own PID namespace "
                               "and /proc) cannot be started here, nor a uid drop; refusing a weaker one")
        inside = "/scratch" if flags is not None else str(scratch)
        app_path = "/app" if flags is not None else str(app_dir)
        config = {"cases": cases, "app": app_path, "startup_s": 30.0,
                  "log": f"{inside}/server.log", "out": f"{inside}/answers.json"}
        (scratch / "config.json").write_text(json.dumps(config))
        command = [sys.executable, f"{inside}/driver.py", f"{inside}/config.json"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
        if flags is not None:
            isolation = "bwrap"
            command = _sandbox_argv(flags, app_dir, scratch) + ["--"] + command
        else:
            isolation = "uid" if drop else "none"
            blocker = scratch / "blocker"
            blocker.mkdir()
            (blocker / "sitecustomize.py").write_text(
                "import sys\nclass _B:\n    def find_spec(self, name, path=None, target=None):\n"
                f"        if name.split('.')[0] in {FORBIDDEN!r}:\n"
                "            raise ModuleNotFoundError(name, name=name)\n"
                "sys.meta_path.insert(0, _B())\n")
            env["PYTHONPATH"] = str(blocker)
            if drop:
                end_candidate_session()  # nothing of an earlier run alive once the scratch is the candidate's
                hand_scratch_to_candidate(scratch)
        # no pipe a process it leaves behind could hold: the server's log is a file in the scratch
        proc = subprocess.Popen(command, env=env, cwd=str(app_dir), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_drop_privileges if drop else None)  # fmt: skip
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:  # the whole session ends with the driver, before root reads what it wrote
            try:
                os.killpg(proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            if drop:
                end_candidate_session()
            proc.kill()
            proc.wait()
        try:
            log = read_output(scratch / "server.log").decode("utf-8", "replace")[-3000:]
        except (OSError, ValueError):
            log = ""
        try:  # written by the candidate's side: a link to the references must gain nothing
            answers = json.loads(read_output(scratch / "answers.json"))
        except (OSError, ValueError, RecursionError):
            answers = None
        if not isinstance(answers, dict) or not isinstance(answers.get("answers"), dict):
            answers = {"up": False, "answers": {}}
        return answers, isolation, log
    finally:
        remove_scratch(scratch)


CANDIDATE_UID = CANDIDATE_GID = 65532  # neither root nor the uid twin's sandboxes run as (65534)
_UID_FALLBACK: list[str | None] = []
_UID_PROBE = r"""
import os, sys
logs, tests = sys.argv[1], sys.argv[2]
if logs and (os.access(logs, os.W_OK) or os.access(logs, os.X_OK)):  # closed: no reward.json to replace
    print("reachable: " + logs); sys.exit(3)
if os.access(tests, os.X_OK) or os.access(tests, os.R_OK):
    print("reachable: " + tests); sys.exit(3)
"""


HARBOR_FOLDERS = ("/tests", "/logs/verifier")  # where Harbor copies them into the container


def in_container() -> bool:
    """Whether the grader runs in a container (Docker, Podman), where its folders are its own copies:
    only there, and only at Harbor's paths, does it close them to others; elsewhere they may be the
    task's own files."""
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


def _drop_privileges() -> None:
    os.setgroups([])
    os.setgid(CANDIDATE_GID)
    os.setuid(CANDIDATE_UID)


def end_candidate_session() -> None:
    """Kill every process of `CANDIDATE_UID` (a child dropped to it sends SIGKILL to all it may
    signal, `kill(-1)`): nothing the candidate started outlives its run (`setsid` included)."""
    pid = os.fork()
    if pid == 0:  # only system calls until _exit
        code = 1
        try:
            _drop_privileges()
            try:
                os.kill(-1, 9)
            except ProcessLookupError:
                pass
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the candidate's processes (uid {CANDIDATE_UID}) could not be ended")


def hand_scratch_to_candidate(scratch: Path) -> None:
    """Give the scratch root filled (still 0700, no candidate process alive) to `CANDIDATE_UID`
    through descriptors, never following a link; the folder itself last."""
    top = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for _folder, dirs, files, dir_fd in os.fwalk(dir_fd=top, follow_symlinks=False):
            for name in dirs + files:
                os.chown(name, CANDIDATE_UID, CANDIDATE_GID, dir_fd=dir_fd, follow_symlinks=False)
        os.fchown(top, CANDIDATE_UID, CANDIDATE_GID)
        os.fchmod(top, 0o700)
    finally:
        os.close(top)


def uid_fallback_unavailable() -> str | None:
    """Why the candidate cannot be served under a dropped uid here (None: it can), where bwrap cannot start.

    In a default Docker container (root, Docker's seccomp profile, no user namespaces), as
    Harbor runs graders, the candidate runs as `CANDIDATE_UID` with no groups and no
    capabilities, relying on the container's network policy; only where a child dropped to
    that uid can enter neither this `tests/` folder nor `$LOGS_DIR` (the grader first closes
    them to others, in a container only).
    """
    if _UID_FALLBACK:
        return _UID_FALLBACK[0]
    tests, logs = Path(__file__).resolve().parent, os.environ.get("LOGS_DIR", "")
    why = None
    if os.geteuid() != 0:
        why = "the grader is not root, so it cannot run the candidate as another uid"
    else:
        for root in [tests, *([Path(logs)] if logs else [])]:
            try:
                if str(root) in HARBOR_FOLDERS and in_container():  # whoever owns them on the host
                    os.chmod(root, 0o700)  # Harbor's /tests and /logs/verifier: the grader's alone
            except OSError:
                pass  # a read-only mount: the check below decides
        try:
            proc = subprocess.run([sys.executable, "-c", _UID_PROBE, logs, str(tests)], capture_output=True,
                                  timeout=60, preexec_fn=_drop_privileges, cwd="/")
            if proc.returncode:
                why = f"uid {CANDIDATE_UID}: {(proc.stdout or proc.stderr).decode(errors='replace').strip()[-200:]}"
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"a child cannot drop to uid {CANDIDATE_UID}: {exc}"
    _UID_FALLBACK.append(why)
    return why


def read_output(path: Path, limit: int = OUTPUT_LIMIT) -> bytes:
    """Read a file the candidate's run produced: a regular file only, never through a
    symlink (a link to the references must gain nothing), never blocking on a FIFO, and
    at most `limit` bytes. Raises OSError or ValueError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{path.name} is over {limit} bytes")
        os.set_blocking(fd, True)
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_scratch(scratch: Path) -> None:
    """Remove a scratch directory the candidate wrote into, at any depth."""
    try:
        shutil.rmtree(scratch, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(scratch)], check=False)
