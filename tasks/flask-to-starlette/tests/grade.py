"""Grader of flask-to-starlette. Self-contained: standard library only (plus the candidate's stack).

1. Migration audit (a hard gate): Flask and Werkzeug are gone from the candidate's
   code, dependencies and files; the candidate is built on Starlette; it neither
   reaches for the original in /source nor wraps a WSGI application.
2. Behaviour: the candidate is served with `uvicorn app:app` on a loopback port in a
   nested sandbox where /tests, /logs and /source are absent and Flask and Werkzeug
   are physically removed; a driver next to it sends every recorded request, and
   each answer is compared with the original's recorded answer.

reward = audit gate x fraction of requests answered as the original did.
`details.json` (per-case differences) is written first, `reward.json` last.
Paths: TESTS_DIR (/tests), APP_DIR (/app), LOGS_DIR (/logs/verifier).
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

FORBIDDEN = ("flask", "werkzeug")
OUTPUT_LIMIT = 64 << 20  # bytes of one file the candidate's run produced
IGNORED_HEADERS = {"date", "server", "content-length", "connection", "keep-alive", "transfer-encoding"}
COOKIE_IGNORED_ATTRIBUTES = {"expires"}
WSGI_BRIDGES = ("WSGIMiddleware", "a2wsgi", "asgiref.wsgi", "WsgiToAsgi")
DEPENDENCY_FILES = ("requirements", "pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "environment.yml")
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
            answers[case["name"]] = {"status": r.status, "headers": r.getheaders(), "body": base64.b64encode(data).decode()}
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


# ---- migration audit ------------------------------------------------------------------------------
def _imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("__import__", "import_module") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


def audit(app_dir: Path) -> list[str]:
    """Reasons the migration did not happen (empty: it did)."""
    problems: list[str] = []
    uses_starlette = False
    for path in sorted(app_dir.rglob("*")):
        rel = path.relative_to(app_dir).as_posix()
        lowered = path.name.lower()
        if any(lowered == f or lowered.startswith(f + "-") or lowered.startswith(f + ".") for f in FORBIDDEN):
            if path.is_dir() or lowered.endswith((".py", ".dist-info", ".egg-info", ".whl", ".tar.gz", ".zip")):
                problems.append(f"{rel}: vendors a forbidden package")
        if not path.is_file():
            continue
        if path.name.startswith(DEPENDENCY_FILES):
            text = path.read_text(errors="replace")
            for name in FORBIDDEN:
                if re.search(rf"(^|[\s\"'\[,]){name}(\s*[<>=!~;\[\"',]|\s*$)", text, re.IGNORECASE | re.MULTILINE):
                    problems.append(f"{rel}: lists {name} as a dependency")
        if path.suffix != ".py":
            continue
        source = path.read_text(errors="replace")
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            problems.append(f"{rel}: does not parse ({exc.msg}, line {exc.lineno})")
            continue
        modules = _imported_modules(tree)
        for name in FORBIDDEN:
            if name in modules:
                problems.append(f"{rel}: imports {name}")
        uses_starlette |= "starlette" in modules
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if any(re.search(r"(^|[\s\"'=:(])/source(/|\b|$)", s) for s in strings):
            problems.append(f"{rel}: refers to the original in /source")
        if any(bridge in source for bridge in WSGI_BRIDGES):
            problems.append(f"{rel}: wraps a WSGI application instead of serving ASGI natively")
    if not (app_dir / "app.py").is_file():
        problems.append("app.py: missing (the service must be app:app)")
    if not uses_starlette:
        problems.append("no module imports starlette: the target stack is not used")
    return problems


# ---- running the candidate ------------------------------------------------------------------------
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


def serve_and_ask(app_dir: Path, cases: list[dict], timeout_s: float) -> tuple[dict, str, str]:
    """Serve the candidate in a nested sandbox and send every case; returns (answers, isolation, log)."""
    scratch = Path(tempfile.mkdtemp(prefix="bookshop-grade-"))
    try:
        (scratch / "driver.py").write_text(DRIVER)
        flags = _bwrap_flags()
        if flags is None and os.environ.get("GRADER_ISOLATION") != "none":
            # fail closed: never serve the candidate where it could read the grader's files
            raise RuntimeError("the candidate's sandbox (bubblewrap with its own PID namespace "
                               "and /proc) cannot be started here; refusing a weaker one")
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
            argv = ["bwrap", "--die-with-parent", "--new-session", *flags, "--dev", "/dev",
                    "--size", str(512 * 1024 * 1024), "--tmpfs", "/tmp"]
            for system in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"):
                if os.path.exists(system):
                    argv += ["--ro-bind", system, system]
            for root in _python_roots():
                argv += ["--ro-bind", str(root), str(root)]
            argv += _mask_forbidden()
            argv += ["--ro-bind", str(app_dir), "/app", "--bind", str(scratch), "/scratch", "--chdir", "/app"]
            command = argv + ["--"] + command
        else:
            isolation = "none"
            blocker = scratch / "blocker"
            blocker.mkdir()
            (blocker / "sitecustomize.py").write_text(
                "import sys\nclass _B:\n    def find_spec(self, name, path=None, target=None):\n"
                f"        if name.split('.')[0] in {FORBIDDEN!r}:\n"
                "            raise ModuleNotFoundError(name, name=name)\n"
                "sys.meta_path.insert(0, _B())\n")
            env["PYTHONPATH"] = str(blocker)
        try:
            subprocess.run(command, env=env, cwd=str(app_dir), timeout=timeout_s, capture_output=True)
        except subprocess.TimeoutExpired:
            pass
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


# ---- comparing ------------------------------------------------------------------------------------
def _cookies(values: list[str]) -> list:
    parsed = []
    for raw in values:
        first, *attrs = raw.split(";")
        name, _, value = first.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        kept = sorted((k.strip().lower(), v.strip().lower() if k.strip().lower() == "samesite" else v.strip())
                      for k, _, v in (a.strip().partition("=") for a in attrs)
                      if k.strip() and k.strip().lower() not in COOKIE_IGNORED_ATTRIBUTES)
        parsed.append((name.strip(), value, kept))
    return sorted(parsed)


def _headers(pairs) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name.lower(), []).append(value)
    return grouped


def compare(expected: dict, got: dict | None) -> list[str]:
    """Differences between the original's recorded answer and the candidate's."""
    if got is None:
        return ["no answer"]
    if "error" in got:
        return [f"request failed: {got['error']}"]
    diffs = []
    if expected["status"] != got["status"]:
        diffs.append(f"status {got['status']}, expected {expected['status']}")
    want, have = _headers(expected["headers"]), _headers(got["headers"])
    for name in sorted((set(want) | set(have)) - IGNORED_HEADERS - {"set-cookie"}):
        if want.get(name) != have.get(name):
            diffs.append(f"header {name}: {have.get(name)}, expected {want.get(name)}")
    if _cookies(want.get("set-cookie", [])) != _cookies(have.get("set-cookie", [])):
        diffs.append(f"set-cookie: {have.get('set-cookie')}, expected {want.get('set-cookie')}")
    body_want, body_have = base64.b64decode(expected["body"]), base64.b64decode(got["body"])
    media = want.get("content-type", [""])[0].split(";")[0].strip().lower()
    if media == "application/json":
        try:
            same = json.loads(body_want) == json.loads(body_have)
        except ValueError:
            same = False
    else:
        same = body_want == body_have
    if not same:
        diffs.append(f"body {body_have[:160]!r}, expected {body_want[:160]!r}")
    return diffs


def main() -> int:
    tests = Path(os.environ.get("TESTS_DIR", "/tests"))
    app_dir = Path(os.environ.get("APP_DIR", "/app")).resolve()
    logs = Path(os.environ.get("LOGS_DIR", "/logs/verifier"))
    logs.mkdir(parents=True, exist_ok=True)
    cases = json.loads((tests / "cases.json").read_text())
    refs = json.loads((tests / "refs" / "responses.json").read_text())
    problems = audit(app_dir) if app_dir.is_dir() else ["the candidate directory is missing"]
    gate = 0.0 if problems else 1.0
    failures: dict[str, list[str]] = {}
    isolation, log, up = "not run", "", False
    if app_dir.is_dir() and (app_dir / "app.py").is_file():
        answers, isolation, log = serve_and_ask(app_dir, cases, timeout_s=240.0)
        up = answers["up"]
        for case in cases:
            diffs = compare(refs[case["name"]], answers["answers"].get(case["name"]))
            if diffs:
                failures[case["name"]] = diffs
    else:
        failures = {case["name"]: ["not run"] for case in cases}
    passed = len(cases) - len(failures)
    behaviour = passed / len(cases)
    details = {"audit": problems, "isolation": isolation, "service_started": up, "failures": failures,
               "server_log_tail": log}
    (logs / "details.json").write_text(json.dumps(details, indent=1))
    result = {"reward": round(gate * behaviour, 6),
              "components": {"migration_audit": gate, "behaviour": round(behaviour, 6),
                             "cases_passed": passed, "cases": len(cases)},
              "isolation": isolation}
    (logs / "reward.json").write_text(json.dumps(result))
    print(json.dumps(result))
    for name, diffs in list(failures.items())[:15]:
        print(f"  {name}: {diffs[0]}")
    for problem in problems:
        print(f"  audit: {problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
