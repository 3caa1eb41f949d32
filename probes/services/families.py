"""Which service probe families apply to a task, and how each side of one is started.

A task declares its families (`[metadata.twin] probes = ["http", "python"]`) or twin
infers them from the original's source: a WSGI/ASGI application (Flask, Starlette,
FastAPI, Django, ...) gives `http`; a command-line entry point (`if __name__ ==
"__main__"`, argparse, click, typer, `[project.scripts]`) gives `process`; importable
modules with public functions give `python` (the Python API).

How each side is started comes from `[metadata.twin.services.<kind>]` (per side, the
driver settings of `probes.services.session.DifferentialSession`) or is inferred: for
`http`, the module that builds the application object, served with `flask run` for a
Flask app and with uvicorn for an ASGI one; a process or a Python API needs nothing
started (each side runs its own tree).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from probes.audit_base import python_files

HTTP_FRAMEWORKS = {
    "flask": ("Flask", "wsgi"),
    "starlette": ("Starlette", "asgi"),
    "fastapi": ("FastAPI", "asgi"),
    "quart": ("Quart", "asgi"),
}
WEB_IMPORTS = {"flask", "starlette", "fastapi", "django", "aiohttp", "bottle", "quart", "falcon", "sanic"}
CLI_IMPORTS = {"argparse", "click", "typer", "fire"}
DEFAULT_SIDES: dict[str, dict[str, Any]] = {
    # each side runs in its own tree with its own interpreter; nothing has to be started first
    "process": {"reference": {}, "candidate": {}},
    "python_api": {"reference": {"preload": []}, "candidate": {"preload": []}},
}


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _parsed(root: Path) -> list[tuple[Path, ast.Module]]:
    out = []
    for path in python_files(root):
        try:
            out.append((path, ast.parse(path.read_text(errors="replace"))))
        except (SyntaxError, ValueError):
            continue
    return out


def infer_families(source: Path) -> dict[str, str]:
    """Families the original's source suggests, each with the reason."""
    found: dict[str, str] = {}
    public = False
    for path, tree in _parsed(source):
        rel = path.relative_to(source).as_posix()
        imported = _imports(tree)
        if imported & WEB_IMPORTS and "http" not in found:
            found["http"] = f"{rel} imports {', '.join(sorted(imported & WEB_IMPORTS))} (a WSGI/ASGI application)"
        text = path.read_text(errors="replace")
        if "process" not in found and (
            re.search(r"__name__\s*==\s*['\"]__main__['\"]", text) or imported & CLI_IMPORTS
        ):
            found["process"] = f"{rel} is a command-line entry point"
        public = public or any(
            isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_") for n in tree.body
        )
    pyproject = source / "pyproject.toml"
    if "process" not in found and pyproject.is_file() and "[project.scripts]" in pyproject.read_text(errors="replace"):
        found["process"] = "pyproject.toml declares [project.scripts]"
    if public and "http" not in found:
        found["python"] = "its modules define public functions and classes (a library API)"
    return found


def probe_families(task) -> dict[str, str]:
    """The families that apply to `task`: declared ones, else inferred ones; each with why."""
    if task.settings.probes is not None:
        return dict.fromkeys(task.settings.probes, "declared in [metadata.twin] probes")
    return infer_families(task.source_dir)


def is_service(task, families: dict[str, str]) -> bool:
    """Whether `task` is a service: it declares its families, or its original serves HTTP.

    A model's original also has a command-line entry point and public functions (`process`,
    `python`); listing those families, with nothing run for them, would read as a gap in a
    model task's probing.
    """
    return "http" in families or task.settings.probes is not None


def find_app(root: Path) -> tuple[str, str, str] | None:
    """(module, variable, 'wsgi'|'asgi') of the module-level web application object under `root`."""
    for path, tree in _parsed(root):
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            func = node.value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            kind = next((k for cls, k in HTTP_FRAMEWORKS.values() if cls == name), None)
            target = node.targets[0]
            if kind and isinstance(target, ast.Name):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                return module, target.id, kind
    return None


def _server(app: tuple[str, str, str]) -> dict[str, Any]:
    module, variable, kind = app
    if kind == "wsgi":
        argv = ["{python}", "-m", "flask", "--app", f"{module}:{variable}", "run", "--port", "{port}"]
    else:
        argv = ["{python}", "-m", "uvicorn", f"{module}:{variable}", "--port", "{port}", "--log-level", "warning"]
    return {"server": {"argv": argv, "cwd": "{root}", "startup_s": 60}}


def sides_for(ctx, kind: str) -> tuple[dict[str, Any] | None, str]:
    """How each side of a `kind` probe starts: (driver settings per side, or None, and why not)."""
    declared = ctx.task.settings.services.get(kind)
    if declared:
        return declared, ""
    if kind in DEFAULT_SIDES:
        return DEFAULT_SIDES[kind], ""
    reference, candidate = find_app(ctx.source), find_app(ctx.candidate)
    if reference is None:
        return None, "no module-level Flask/Starlette/FastAPI application found in the original"
    if candidate is None:
        return None, "no module-level Flask/Starlette/FastAPI application found in the candidate"
    return {"reference": _server(reference), "candidate": _server(candidate)}, ""


ROUTE_METHODS = {"get", "post", "put", "delete", "patch"}
GENERIC_VALUES = ["", "0", "1", "-1", "3", "abc", "A b"]
REQUEST_READS = {"args": "query", "form": "form", "cookies": "cookies"}


def _route(decorator: ast.expr) -> tuple[list[str], str] | None:
    """(methods, path template) of a Flask/Starlette/FastAPI route decorator."""
    if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute) and decorator.args):
        return None
    first = decorator.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    verb = decorator.func.attr
    if verb in ROUTE_METHODS:
        methods = [verb.upper()]
    elif verb == "route":
        methods = ["GET"]
        for keyword in decorator.keywords:
            if keyword.arg == "methods" and isinstance(keyword.value, (ast.List, ast.Tuple)):
                methods = [e.value for e in keyword.value.elts if isinstance(e, ast.Constant)]
    else:
        return None
    # '<int:id>' / '{id:int}' draw integers; any other parameter draws text
    path = re.sub(r"<int:\w+>|\{\w+:int\}", "{int}", first.value)
    path = re.sub(r"<(?:\w+:)?\w+>|\{(?!int\})\w+(?::\w+)?\}", "{text}", path)
    return methods, path


def route_space(source: Path) -> dict[str, Any] | None:
    """A request space over every route of the original's web app, with the parameters it reads.

    Methods and paths come from route decorators; query, form and cookie names from
    `request.args/form/cookies.get("name", default)` (the default is one of the drawn values).
    """
    methods: set[str] = set()
    paths: set[str] = set()
    reads: dict[str, dict[str, set[str]]] = {kind: {} for kind in REQUEST_READS.values()}
    for _, tree in _parsed(source):
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    found = _route(decorator)
                    if found:
                        methods.update(found[0])
                        paths.add(found[1])
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr in REQUEST_READS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                values = reads[REQUEST_READS[node.func.value.attr]].setdefault(node.args[0].value, set(GENERIC_VALUES))
                if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value is not None:
                    values.add(str(node.args[1].value))
    if not paths:
        return None
    space: dict[str, Any] = {
        "methods": sorted(methods),
        "paths": sorted(paths),
        "accept": ["text/html", "application/json", "text/plain", "*/*"],
    }
    for kind, names in reads.items():
        if names:
            space[kind] = {name: {"values": sorted(values)} for name, values in sorted(names.items())}
    if reads["form"]:
        space["content_types"] = ["application/x-www-form-urlencoded"]
    return space


def inferred_services(task) -> dict[str, Any] | None:
    """A `SERVICES` literal twin states by itself: the original's routes, when `http` applies."""
    if "http" not in probe_families(task):
        return None
    space = route_space(task.source_dir)
    return {"kind": "http", "spaces": {"routes": space}} if space else None
