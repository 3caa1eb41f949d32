"""Whether the reference side can import what a task's probes use: the check `twin task fetch` ends with.

A reference environment that pip built without complaint can still fail at import (a
companion built for another torch: `operator torchvision::nms does not exist`). The
modules checked are the original's top-level packages and every module the task's probe
files import outside their `candidate_*` functions; each is imported on the reference
side, in its sandbox, as a probe's reference would be, and a failure is reported with
the import's own last line.
"""

from __future__ import annotations

import ast
import json
import sys
import tempfile
from pathlib import Path

from ground.terminal import shown
from ground.untrusted_io import AgentFileError, read_regular_text
from probes.context import make_context
from task_model.model import Task

_IMPORT_ALL = """
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
failed = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        lines = traceback.format_exception_only(type(exc), exc)
        failed[name] = (lines[-1] if lines else repr(exc)).strip()[:500]
print("\\n" + json.dumps(failed))
"""
PROBE_FILE_CAP = 1024 * 1024


def original_modules(source: Path) -> list[str]:
    """The original's top-level modules and packages (what `import NAME` finds at its root)."""
    names = []
    for entry in sorted(source.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file() and entry.name.isidentifier():
            names.append(entry.name)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            names.append(entry.stem)
    return names


def probe_modules(text: str) -> list[str]:
    """The absolute modules a probe file imports outside its `candidate_*` functions (none if it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    skipped = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and function.name.startswith("candidate")
        for node in ast.walk(function)
    }
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return list(dict.fromkeys(names))


def reference_modules(task: Task) -> list[str]:
    """What the reference side must import for `task`: the original's top level and its probes' imports."""
    names = original_modules(task.source_dir)
    for relative in task.settings.probe_files:
        try:
            text = read_regular_text(task.root / relative, PROBE_FILE_CAP)
        except AgentFileError:
            continue  # `twin probe` says why a probe file cannot be read
        names += probe_modules(text)
    return list(dict.fromkeys(names))


def import_failures(task: Task, modules: list[str], *, sandbox_kind: str = "auto", timeout_s: float = 600.0):
    """Import each of `modules` on `task`'s reference side; the import's own last line for each that fails.

    Returns:
        {module: "ModuleNotFoundError: No module named 'x'"}; empty when every one imports.
    """
    if not modules:
        return {}
    with tempfile.TemporaryDirectory(prefix="twin-imports-") as empty:
        with make_context(task, empty, sandbox_kind=sandbox_kind, timeout_s=timeout_s) as ctx:
            source = ctx.roots("reference")["source"] or ""
            result = ctx.sandbox("reference").exec([sys.executable, "-c", _IMPORT_ALL, source, *modules])
    last = result.stdout.strip().splitlines()[-1:] if result.stdout.strip() else []
    try:
        failed = json.loads(last[0]) if last else None
    except ValueError:
        failed = None
    if not isinstance(failed, dict):
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return {", ".join(modules): shown(f"the import check did not finish: {why}")[:500]}
    return {shown(str(k))[:200]: shown(str(v))[:500] for k, v in failed.items()}
