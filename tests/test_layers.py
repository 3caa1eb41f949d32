"""twin's floors: which part of the code may import which, checked on the import graph of the sources.

`FLOORS` lists the floors, lowest first. A module belongs to the floor whose longest
prefix names it, and may import modules of its own floor and of the floors below,
never one above: not at the top of a file, not inside a function, not under
`TYPE_CHECKING`. The graph is read with `ast` from the source files, so an import
that only runs inside a function is seen like any other.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "roles", "probes", "evidence_store", "benchmark_adapter", "prompts")

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # errors, the model and sandbox protocols, the boundary, the isolation policy, agent trees
    ("ground", ("harness.ground",)),
    # the prompt templates (no code of their own)
    ("prompts", ("prompts",)),
    # the sandbox implementations and their registry: what probes, graders and roles run in
    ("sandboxes", ("harness.sandbox",)),
    ("evidence", ("evidence_store",)),
    # the task model: loading a task, reading its Dockerfile, laying out its visible parts
    ("tasks", ("benchmark_adapter.task",)),
    ("probes", ("probes",)),
    # the grader, oracles, seeded defects and `twin task new` (which records references with probes)
    ("grading", ("benchmark_adapter",)),
    ("roles", ("roles",)),
    # the loop, the scaffolds, the model clients, runs, benches and reports
    ("harness", ("harness",)),
    ("commands", ("harness.cli",)),
)

# (importer, imported): why the edge points upward. Keep this short.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it stands, and whether it runs inside a function."""

    importer: str
    target: str
    line: int
    in_function: bool


def module_name(path: Path, root: Path) -> str:
    """`harness/ground/model.py` -> `harness.ground.model`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path, packages: tuple[str, ...]) -> list[Import]:
    """Every import of a module of `packages` made by a module of `packages` under `root`."""
    sources = {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    edges: list[Import] = []
    for name, path in sources.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, package, sources):
                if target.split(".")[0] in packages:
                    edges.append(Import(name, target, node.lineno, in_function))
    return edges


def _imports(tree: ast.AST, in_function: bool = False):
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _imports(child, inside)


def _targets(node: ast.Import | ast.ImportFrom, package: str, sources: dict) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(parent + ([node.module] if node.module else []))
    # `from pkg import module` imports the module itself
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]


def floor_of(module: str, floors=FLOORS) -> int:
    """Index of the floor whose longest prefix names `module`."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise ValueError(f"{module} is on no floor; add its package to FLOORS")
    return best


def upward_imports(edges: list[Import], floors=FLOORS, allowed=ALLOWED) -> list[str]:
    """One line per import of a module on a higher floor than its importer's."""
    found = []
    for edge in edges:
        low, high = floor_of(edge.importer, floors), floor_of(edge.target, floors)
        if high > low and (edge.importer, edge.target) not in allowed:
            where = "inside a function" if edge.in_function else "at module level"
            found.append(
                f"{edge.importer}:{edge.line} imports {edge.target} {where} "
                f"(floor {floors[low][0]!r} may not import floor {floors[high][0]!r})"
            )
    return found


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return import_graph(REPO, PACKAGES)


def test_no_module_imports_a_floor_above_its_own(edges):
    assert upward_imports(edges) == []


def test_the_allow_list_names_edges_that_exist(edges):
    present = {(e.importer, e.target) for e in edges}
    assert set(ALLOWED) <= present, "drop allow-list entries whose import is gone"


def test_ground_imports_only_ground(edges):
    ground = [e for e in edges if e.importer.startswith("harness.ground")]
    assert ground and all(e.target.startswith("harness.ground.") for e in ground)


def test_harness_package_itself_imports_nothing():
    tree = ast.parse((REPO / "harness" / "__init__.py").read_text())
    assert [node for node, _ in _imports(tree)] == []


def test_every_module_is_on_a_floor(edges):
    for edge in edges:
        floor_of(edge.importer)
        floor_of(edge.target)


# ---- the checker has teeth ------------------------------------------------------------------------
def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_checker_reports_an_upward_import_inside_a_function(tmp_path):
    root = _tree(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/mod.py": """
                def late():
                    from high.top import thing
                    return thing
            """,
            "high/__init__.py": "",
            "high/top.py": "from low import mod\nthing = mod\n",
        },
    )
    floors = (("low", ("low",)), ("high", ("high",)))
    edges = import_graph(root, ("low", "high"))
    assert Import("low.mod", "high.top", 3, True) in edges
    assert Import("high.top", "low.mod", 1, False) in edges
    found = upward_imports(edges, floors, allowed={})
    assert len(found) == 1 and found[0].startswith("low.mod:3 imports high.top inside a function")
    assert upward_imports(edges, floors, allowed={("low.mod", "high.top"): "why"}) == []


def test_checker_resolves_relative_imports_and_twins_own_floors(tmp_path):
    root = _tree(
        tmp_path,
        {
            "harness/__init__.py": "",
            "harness/session.py": "",
            "harness/ground/__init__.py": "",
            "harness/ground/model.py": "from .. import session\n",
            "probes/__init__.py": "",
            "probes/context.py": "import roles.agent\n",
            "roles/__init__.py": "",
            "roles/agent.py": "from harness.ground import model\n",
        },
    )
    edges = import_graph(root, ("harness", "probes", "roles"))
    found = upward_imports(edges, allowed={})
    assert [line.split(" (")[0] for line in found] == [
        "harness.ground.model:1 imports harness.session at module level",
        "probes.context:1 imports roles.agent at module level",
    ]
