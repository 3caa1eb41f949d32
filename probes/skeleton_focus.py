"""Probe-skeleton components aimed at named modules and classes (`twin probe --init F --module M [--class C]`).

On a large package a skeleton of everything is no help: the first components alphabetically
take the probes, and the one the task is about sits in a comment. Here only the named
modules (a package: its `__init__` and its public submodules) are read with libcst, and
their components are ordered by how much of the original depends on them: the number of
top-level definitions, in the component's own module or in a module that imports it
(directly, or through a package `__init__` that imports it), that name it. Every other file
is read once with `ast` for its imports and names only, so this takes seconds on a package
of a hundred thousand lines.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from probes.skeleton import Component, components_of_files
from task_model.import_closure import ModuleFile, read_modules, tree_sources


class FocusError(ValueError):
    """A named module or class that is not in the original (one line)."""


def focused_components(source: Path, modules: list[str], classes: list[str] = ()) -> list[Component]:
    """The public components of `modules` (only the classes `classes`, where given), most depended on first.

    Raises:
        FocusError: a module not under `source`, or a class none of the modules defines.
    """
    source = Path(source)
    sources = tree_sources(source)
    known = read_modules(sources, count_torch=False)
    files: list[Path] = []
    for module in modules:
        if module not in known:
            raise FocusError(f"--module {module}: no such module under {source}")
        files += _module_files(source, known, module)
    found = components_of_files(source, sorted(set(files)))
    if classes:
        missing = [c for c in classes if not any(x.kind == "class" and x.name == c for x in found)]
        if missing:
            raise FocusError(f"--class {', '.join(missing)}: not a class of {', '.join(modules)}")
        found = [c for c in found if c.kind == "class" and c.name in classes]
    scores = _dependents(found, sources, known)
    order = {id(c): i for i, c in enumerate(found)}
    return sorted(found, key=lambda c: (-scores[c.dotted], order[id(c)]))


def _module_files(source: Path, known: Mapping[str, ModuleFile], module: str) -> list[Path]:
    """The module's file; for a package, its `__init__` and its public submodules' files."""
    files = [source / known[module].path]
    if known[module].path.endswith("__init__.py"):
        files += [
            source / m.path
            for name, m in known.items()
            if name.startswith(module + ".") and not any(p.startswith("_") for p in name[len(module) + 1 :].split("."))
        ]
    return files


def _dependents(found: list[Component], sources: Mapping[str, str], known: Mapping[str, ModuleFile]) -> dict:
    """For each component, the top-level definitions that name it where its module is importable from."""
    targets = {name: {t for t, _ in m.imports} for name, m in known.items()}
    users: dict[str, list[str]] = {}  # a component's module -> the modules it can be used from
    for module in {c.module for c in found}:
        exporters = {module} | {p for p in known if module.startswith(p + ".") and module in targets[p]}
        users[module] = [name for name in known if name == module or exporters & targets[name]]
    sites = _named_sites(sources, {name: known[name] for names in users.values() for name in names})
    scores = {}
    for component in found:
        scores[component.dotted] = sum(
            component.name in names and not (name == component.module and site == component.name)
            for name in users[component.module]
            for site, names in sites.get(name, {}).items()
        )
    return scores


def _named_sites(sources: Mapping[str, str], known: Mapping[str, ModuleFile]) -> dict[str, dict[str, set[str]]]:
    """module -> top-level definition (or `<module>` for the rest of its body) -> the names it uses.

    Only the modules `known` are read (those a component can be used from).
    """
    sites: dict[str, dict[str, set[str]]] = {}
    for name, module in known.items():
        try:
            tree = ast.parse(sources[module.path])
        except (SyntaxError, ValueError):
            continue
        per: dict[str, set[str]] = {}
        for node in tree.body:
            key = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else "<module>"
            used = per.setdefault(key, set())
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name):
                    used.add(inner.id)
                elif isinstance(inner, ast.Attribute):
                    used.add(inner.attr)
                elif isinstance(inner, ast.alias):
                    used.add(inner.name.rsplit(".", 1)[-1])
        sites[name] = per
    return sites
