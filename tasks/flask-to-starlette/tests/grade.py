"""Grader of flask-to-starlette. Self-contained: standard library only (plus the candidate's stack).

1. Migration audit (a hard gate): Flask and Werkzeug are gone from the candidate's
   code, dependencies and files; the candidate is built on Starlette; it neither
   reaches for the original in /source nor wraps a WSGI application.
2. Behaviour: the candidate is served with `uvicorn app:app` on a loopback port in a
   nested sandbox where /tests, /logs and /source are absent and Flask and Werkzeug
   are physically removed; a driver next to it sends every recorded request, and
   each answer is compared with the original's recorded answer. That sandbox is
   started once first, over an empty directory: where it cannot start, reward.json
   reports an `infrastructure_error` (retried, never scored) and nothing is run.

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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving import FORBIDDEN, nested_sandbox_unavailable, serve_and_ask  # noqa: E402

IGNORED_HEADERS = {"date", "server", "content-length", "connection", "keep-alive", "transfer-encoding"}
COOKIE_IGNORED_ATTRIBUTES = {"expires"}
WSGI_BRIDGES = ("WSGIMiddleware", "a2wsgi", "asgiref.wsgi", "WsgiToAsgi")
DEPENDENCY_FILES = ("requirements", "pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "environment.yml")


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
    unavailable = nested_sandbox_unavailable()  # before any candidate code: the grader's machinery, retried
    if unavailable is not None:
        (logs / "reward.json").write_text(json.dumps({"reward": 0.0, "infrastructure_error": unavailable}))
        print(unavailable)
        return 0
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
