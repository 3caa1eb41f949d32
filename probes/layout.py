"""How the candidate's modules are imported: its import roots and the module names they give.

twin imposes no layout on a candidate. A task says where the candidate's modules are
imported from (`[metadata.twin] candidate_import_roots = ["jax_repo"]`: `/app/jax_repo`
is put on `sys.path`, and `jax_repo/model.py` is the module `model`); without that,
the layout tells: a directory without `__init__.py` whose modules import a sibling
by bare name (`import model` next to `model.py`) is an import root. The candidate's
own directory is always one. Every candidate-side process (imports check, probes,
checks) gets the roots on `sys.path`, and every module is named the way those roots
import it; the migration audit counts a module under any root as the candidate's own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from probes.audit_base import python_files, read_source

SKIP_DIRS = {"tests", "test", "__pycache__", ".git", "build", "dist", ".venv", "venv"}


def _imported_names(path: Path) -> set[str]:
    """Top-level names a file imports absolutely (`import a.b` -> 'a', `from a import b` -> 'a')."""
    try:
        tree = ast.parse(read_source(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def _module_names_in(folder: Path) -> set[str]:
    """Names importable from `folder` when it is on sys.path: its modules and packages."""
    names = {p.stem for p in folder.glob("*.py")}
    names |= {d.name for d in folder.iterdir() if d.is_dir() and (d / "__init__.py").is_file()}
    return names


def infer_import_roots(candidate: Path) -> list[str]:
    """Directories (relative to `candidate`) whose modules import their siblings by bare name.

    A directory holding `__init__.py` is a package, imported through its parent, never
    a root of its own.
    """
    candidate = candidate.resolve()
    roots = []
    folders = sorted({p.parent for p in python_files(candidate)})
    for folder in folders:
        rel = folder.relative_to(candidate)
        if folder == candidate or (folder / "__init__.py").is_file():
            continue
        if SKIP_DIRS & set(rel.parts) or any(part.startswith(".") for part in rel.parts):
            continue
        siblings = _module_names_in(folder)
        for path in folder.glob("*.py"):
            if _imported_names(path) & (siblings - {path.stem}):
                roots.append(rel.as_posix())
                break
    return roots


def import_roots(candidate: Path, declared: list[str] | None) -> list[str]:
    """The candidate's import roots, relative to it, most specific first; '' is the candidate itself.

    Args:
        candidate: the candidate tree (host path).
        declared: `[metadata.twin] candidate_import_roots`, or None to infer them.
    """
    found = declared if declared is not None else infer_import_roots(candidate)
    cleaned = [str(Path(r)).strip("/") for r in found]
    cleaned = ["" if r == "." else r for r in cleaned]
    ordered = sorted({r for r in cleaned if r}, key=lambda r: (-r.count("/"), r))
    return [*ordered, ""]


def dotted_name(rel: str | Path) -> str:
    """The dotted name of a module file relative to the directory it is imported from.

    'pkg/model.py' -> 'pkg.model'; 'pkg/__init__.py' -> 'pkg'; a top-level '__init__.py' -> ''.
    """
    parts = list(Path(rel).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_name(rel: str | Path, roots: list[str]) -> str:
    """The dotted name a candidate file is imported as under the first root holding it.

    'jax_repo/model.py' with root 'jax_repo' -> 'model'; 'pkg/__init__.py' -> 'pkg'.
    """
    rel = Path(rel)
    for root in roots:
        if not root:
            inner = rel
        elif rel.parts[: len(Path(root).parts)] == Path(root).parts:
            inner = rel.relative_to(root)
        else:
            continue
        return dotted_name(inner)
    return ".".join(rel.with_suffix("").parts)


def candidate_modules(candidate: Path, roots: list[str]) -> dict[str, str]:
    """Every importable module of the candidate: dotted name -> file relative to the candidate.

    Tests, setup scripts, caches and hidden directories are left out; a file under
    several roots is named by the most specific one.
    """
    candidate = candidate.resolve()
    modules: dict[str, str] = {}
    for path in python_files(candidate):
        rel = path.relative_to(candidate)
        if SKIP_DIRS & set(rel.parts[:-1]) or any(part.startswith(".") for part in rel.parts[:-1]):
            continue
        if rel.name in ("setup.py", "conftest.py") or rel.name.startswith("test_"):
            continue
        name = module_name(rel, roots)
        if name and name not in modules:
            modules[name] = rel.as_posix()
    return modules


def own_top_names(candidate: Path, roots: list[str]) -> set[str]:
    """Top-level names an import of the candidate resolves to the candidate's own module."""
    candidate = candidate.resolve()
    names: set[str] = set()
    for root in roots:
        folder = candidate / root if root else candidate
        if folder.is_dir():
            names |= _module_names_in(folder)
            names |= {d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")}
    return names
