"""twin's floors: one floor per top-level package, no import that runs back up, no circle of files.

`FLOORS` lists the top-level packages, lowest first; `INNER_FLOORS` the floors of the folders
inside a package that has more than one (`ground`: its contracts below its sandboxes; `harness`:
models, runs, scaffolds, benches, commands). A module stands on the floor of the listed folder
that is the longest prefix of its dotted name. A module may import modules of its own floor and
of the floors below, never one above: not at the top of a file, not inside a function, not under
`TYPE_CHECKING`, not through `importlib.import_module("...")` with a literal name. The graph is
read with `ast` from the source files, so an import that only runs inside a function is seen like
any other. Code that runs inside a sandbox (`INSIDE`) imports nothing of twin's. Separately, no
files may import each other in a loop."""

from __future__ import annotations

import ast
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ground", "prompts", "evidence_store", "task_model", "probes", "benchmark_adapter", "roles", "harness")

# One floor per top-level package, lowest first: a package may import its own floor and the floors below.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the boundary layer everything stands on: errors, the model and sandbox protocols, the boundary and
    # isolation policy, views, agent trees, untrusted I/O, the trajectory record, the sandboxes themselves
    ("ground", ("ground",)),
    # the prompt templates (no code of their own)
    ("prompts", ("prompts",)),
    ("evidence", ("evidence_store",)),
    # the task model: loading a task, reading its Dockerfile, laying out its visible parts
    ("task model", ("task_model",)),
    ("probes", ("probes",)),
    # the grader, oracles, seeded defects, references and `twin task new`
    ("grading", ("benchmark_adapter",)),
    ("roles", ("roles",)),
    # the roof: model clients, runs, scaffolds, benches and the CLI
    ("roof", ("harness",)),
)

# Inside a top-level package, its folders stand on floors of their own, lowest first.
INNER_FLOORS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "ground": (
        ("contracts", ("ground",)),
        # the sandbox implementations and their registry: what probes, graders and roles run in
        ("sandboxes", ("ground.sandboxes",)),
    ),
    "harness": (
        # `harness` itself is only the package's version
        ("version", ("harness",)),
        # model clients by name: litellm, replay, scripted, human, inbox; budgets and the ledger
        ("models", ("harness.models",)),
        # what every scaffold shares of one run: config and directory, session, workspace, closing steps
        ("run", ("harness.run",)),
        ("scaffolds", ("harness.scaffolds",)),
        ("bench", ("harness.bench",)),
        ("commands", ("harness.cli",)),
    ),
}

# Code that runs inside a sandbox beside the candidate or the grader: it imports nothing of twin's.
# (The bundled tasks' own code, their probe files included, lies outside twin's packages: `tasks_imports`.)
INSIDE = ("probes.services.drivers", "benchmark_adapter.grading.templates")

# Folders whose modules still stand on two floors, each with what makes it one floor.
SPLIT_PENDING: dict[str, str] = {}

# Circles of files that are still there, each with what breaks it; drop an entry once it is gone.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Import:
    """One import's target, where it stands, and whether it runs inside a function."""

    importer: str
    target: str
    path: str
    line: int
    in_function: bool


def module_name(path: Path, root: Path) -> str:
    """`ground/model.py` -> `ground.model`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources_of(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every Python module of `packages` under `root`, by dotted name."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def import_graph(root: Path, packages: tuple[str, ...]) -> list[Import]:
    """Every import of a module of `packages` made by a module of `packages` under `root`."""
    sources = sources_of(root, packages)
    edges: list[Import] = []
    for name, path in sources.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        shown = str(path.relative_to(root))
        for node, in_function in _imports(ast.parse(path.read_text(), shown)):
            for target in _targets(node, package, sources):
                if target.split(".")[0] in packages:
                    edges.append(Import(name, target, shown, node.lineno, in_function))
    return edges


def _imports(tree: ast.AST, in_function: bool = False):
    """Import statements and `import_module("literal")` calls, each with whether it runs in a function."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom) or _literal_import_call(child) is not None:
            yield child, in_function
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _imports(child, inside)


def _literal_import_call(node: ast.AST) -> str | None:
    """The module named by `import_module("x")` / `importlib.import_module("x")` / `__import__("x")`."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    first = node.args[0]
    if called in ("import_module", "__import__") and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _targets(node: ast.AST, package: str, sources: dict) -> list[str]:
    if isinstance(node, ast.Call):
        return [_literal_import_call(node) or ""]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(parent + ([node.module] if node.module else []))
    # `from pkg import module` imports the module itself
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]


def floor_of(module: str, floors=FLOORS) -> int:
    """Index of the floor whose longest listed prefix names `module`."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise ValueError(f"{module} is on no floor; add its folder to FLOORS")
    return best


def upward_imports(edges: list[Import], floors=FLOORS) -> list[str]:
    """One line per import of a module on a higher floor than its importer's: file, line, both floors."""
    found = []
    for edge in edges:
        low, high = floor_of(edge.importer, floors), floor_of(edge.target, floors)
        if high > low:
            where = "inside a function" if edge.in_function else "at module level"
            found.append(
                f"{edge.path}:{edge.line}: {edge.importer} imports {edge.target} {where} "
                f"(floor {floors[low][0]!r} may not import floor {floors[high][0]!r}, above it)"
            )
    return found


def circles(edges: list[Import]) -> dict[frozenset[str], list[str]]:
    """Each set of files that import each other in a loop, with the imports that tie it."""
    graph = nx.DiGraph()
    for edge in edges:
        if edge.importer != edge.target:
            graph.add_edge(edge.importer, edge.target)
    found = {}
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            ties = sorted(
                {f"{e.path}:{e.line} -> {e.target}" for e in edges if e.importer in component and e.target in component}
            )
            found[frozenset(component)] = ties
    return found


def inside_imports(edges: list[Import]) -> list[str]:
    """Imports of twin's code made by code that runs inside a sandbox (`INSIDE`), as `file:line -> target`."""
    inside = [e for e in edges if any(e.importer == p or e.importer.startswith(p + ".") for p in INSIDE)]
    return [f"{e.path}:{e.line} -> {e.target}" for e in inside]


def tasks_imports(tasks: Path) -> list[str]:
    """Imports of twin's packages made by the files under `tasks` (the bundled tasks), as `file:line -> target`."""
    found = []
    for path in sorted(tasks.rglob("*.py")):
        for node, _ in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                names = [_literal_import_call(node) or ""] if isinstance(node, ast.Call) else []
            shown = path.relative_to(tasks.parent)
            found += [f"{shown}:{node.lineno} -> {name}" for name in names if name.split(".")[0] in PACKAGES]
    return found


def reaches_into_tasks(sources: dict[str, Path]) -> list[str]:
    """Where twin's own code imports the bundled tasks or joins a path into `tasks/`, as `file:line`.

    A task is known by its folder and its declaration: no code of twin's looks a task's files up
    in the bundled suite (its probes, its grader), by name or by path.
    """
    found = []
    for path in sources.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                hit = any(alias.name.split(".")[0] == "tasks" for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                hit = not node.level and (node.module or "").split(".")[0] == "tasks"
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                sides = (node.left, node.right)
                hit = any(isinstance(s, ast.Constant) and str(s.value).split("/")[0] == "tasks" for s in sides)
            else:
                hit = False
            if hit:
                found.append(f"{path.name}:{node.lineno}")
    return found


def folder_of(module: str, sources: dict[str, Path]) -> str:
    """The folder a module lies in, dotted (a package's `__init__` lies in its own folder)."""
    return module if sources[module].name == "__init__.py" else module.rpartition(".")[0]


def mixed_folders(sources: dict[str, Path], floors=FLOORS) -> dict[str, set[str]]:
    """Folders whose modules stand on more than one floor, with those floors' names."""
    by_folder: dict[str, set[str]] = defaultdict(set)
    for module in sources:
        by_folder[folder_of(module, sources)].add(floors[floor_of(module, floors)][0])
    return {folder: names for folder, names in by_folder.items() if len(names) > 1}


@pytest.fixture(scope="module")
def sources() -> dict[str, Path]:
    return sources_of(REPO, PACKAGES)


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return import_graph(REPO, PACKAGES)


def test_no_module_imports_a_floor_above_its_own(edges):
    found = upward_imports(edges)
    assert not found, "imports that run back up:\n" + "\n".join(found)


def test_every_floor_is_one_top_level_package():
    assert [prefix for _, prefixes in FLOORS for prefix in prefixes] == list(PACKAGES)


@pytest.mark.parametrize("package", sorted(INNER_FLOORS))
def test_no_folder_imports_a_floor_above_its_own_inside_its_package(edges, package):
    inside = [e for e in edges if e.importer.split(".")[0] == package == e.target.split(".")[0]]
    found = upward_imports(inside, INNER_FLOORS[package])
    assert inside and not found, "imports that run back up:\n" + "\n".join(found)


def test_no_files_import_each_other_in_a_circle(edges):
    found = circles(edges)
    new = ["\n  ".join([", ".join(sorted(c)), *ties]) for c, ties in found.items() if c not in KNOWN_CIRCLES]
    assert not new, "files that import each other in a circle:\n" + "\n".join(new)
    gone = [why for circle, why in KNOWN_CIRCLES.items() if circle not in found]
    assert gone == [], "these circles are broken: drop them from KNOWN_CIRCLES"


@pytest.mark.parametrize("package", sorted(INNER_FLOORS))
def test_every_folder_stands_on_one_floor(sources, package):
    own = {name: path for name, path in sources.items() if name.split(".")[0] == package}
    mixed = mixed_folders(own, INNER_FLOORS[package])
    assert set(mixed) == set(SPLIT_PENDING), {folder: sorted(names) for folder, names in mixed.items()}


MAX_MODULE_LINES = 400


def test_no_module_of_twins_own_code_is_over_400_lines(sources):
    """A module that grows past this holds more than one responsibility: split it (the tasks' code is not twin's)."""
    long = {name: n for name, path in sources.items() if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_every_floor_names_code_that_exists(sources):
    listed = [p for floors in (FLOORS, *INNER_FLOORS.values()) for _, prefixes in floors for p in prefixes]
    for prefix in [*listed, *INSIDE]:
        assert any(m == prefix or m.startswith(prefix + ".") for m in sources), f"{prefix} in FLOORS names no code"


def test_every_module_is_on_a_floor(sources, edges):
    for module in [*sources, *(e.target for e in edges)]:
        floor_of(module)


def test_ground_imports_only_ground(edges):
    ground = [e for e in edges if e.importer.startswith("ground")]
    outside = [f"{e.path}:{e.line} -> {e.target}" for e in ground if not e.target.startswith("ground.")]
    assert ground and not outside, outside


def test_code_that_runs_inside_a_sandbox_imports_nothing_of_twins(edges):
    assert inside_imports(edges) == []


def test_twins_packages_reach_into_no_bundled_task(sources):
    assert reaches_into_tasks(sources) == []


def test_the_bundled_tasks_and_their_probe_files_import_nothing_of_twins():
    assert (REPO / "tasks").is_dir() and tasks_imports(REPO / "tasks") == []


def test_harness_package_itself_imports_nothing():
    tree = ast.parse((REPO / "harness" / "__init__.py").read_text())
    assert [node for node, _ in _imports(tree)] == []


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
    assert Import("low.mod", "high.top", "low/mod.py", 3, True) in edges
    assert Import("high.top", "low.mod", "high/top.py", 1, False) in edges
    assert upward_imports(edges, floors) == [
        "low/mod.py:3: low.mod imports high.top inside a function (floor 'low' may not import floor 'high', above it)"
    ]
    assert list(circles(edges)) == [frozenset({"low.mod", "high.top"})]


def test_checker_sees_a_deliberate_upward_import_added_to_twins_own_ground(tmp_path):
    """A copy of the real ground with one import of the run package added inside a function fails."""
    files = {f"ground/{p.name}": p.read_text() for p in (REPO / "ground").glob("*.py")}
    files["harness/__init__.py"] = ""
    files["harness/run/__init__.py"] = ""
    files["harness/run/directory.py"] = "from ground.errors import TwinError\n"
    packages = ("ground", "harness")
    assert upward_imports(import_graph(_tree(tmp_path, files), packages)) == []
    late = "\n\ndef _late():\n    from harness.run import directory\n    return directory\n"
    files["ground/errors.py"] += late
    found = upward_imports(import_graph(_tree(tmp_path, files), packages))
    assert len(found) == 1 and found[0].startswith("ground/errors.py:")
    assert "harness.run.directory inside a function (floor 'ground' may not import floor 'roof'" in found[0]


def test_checker_sees_an_upward_import_between_two_of_twins_top_level_packages(tmp_path):
    """The real probes and grading packages, with one import of grading added to a probe module, fail."""
    files = {
        str(p.relative_to(REPO)): p.read_text()
        for package in ("probes", "benchmark_adapter")
        for p in (REPO / package).rglob("*.py")
    }
    packages = ("probes", "benchmark_adapter")
    assert upward_imports(import_graph(_tree(tmp_path, files), packages)) == []
    files["probes/compare.py"] += "\nfrom benchmark_adapter.grading import grader\n"
    found = upward_imports(import_graph(_tree(tmp_path, files), packages))
    assert len(found) == 1 and found[0].startswith("probes/compare.py:"), found
    assert "(floor 'probes' may not import floor 'grading', above it)" in found[0]


def test_checker_resolves_relative_imports_literal_import_module_and_twins_own_floors(tmp_path):
    root = _tree(
        tmp_path,
        {
            "harness/__init__.py": "",
            "harness/run/__init__.py": "",
            "harness/run/session.py": "",
            "harness/models/__init__.py": "",
            "harness/models/replay.py": "from ..run import session\n",
            "ground/__init__.py": "",
            "ground/model.py": "from harness.run import session\n",
            "probes/__init__.py": "",
            "probes/context.py": "import importlib\n\ndef f():\n    return importlib.import_module('roles.agent')\n",
            "probes/services/__init__.py": "",
            "probes/services/drivers/__init__.py": "",
            "probes/services/drivers/tiny.py": "from probes import context\n",
            "roles/__init__.py": "",
            "roles/agent.py": "from ground import model\n",
        },
    )
    edges = import_graph(root, ("ground", "harness", "probes", "roles"))
    assert [line.split(" (")[0] for line in upward_imports(edges)] == [
        "ground/model.py:1: ground.model imports harness.run.session at module level",
        "probes/context.py:4: probes.context imports roles.agent inside a function",
    ]
    roof = [e for e in edges if e.importer.startswith("harness")]
    assert [line.split(" (")[0] for line in upward_imports(roof, INNER_FLOORS["harness"])] == [
        "harness/models/replay.py:1: harness.models.replay imports harness.run.session at module level",
    ]
    assert inside_imports(edges) == ["probes/services/drivers/tiny.py:1 -> probes.context"]


def test_checker_reports_twins_code_that_reaches_into_the_bundled_tasks(tmp_path):
    root = _tree(
        tmp_path,
        {
            "probes/__init__.py": "",
            "probes/suite.py": "from pathlib import Path\nLIB = Path(__file__).parents[1] / 'tasks' / 'mlp-train'\n",
            "task_model/__init__.py": "",
            "task_model/loader.py": "import json\n\n\ndef f():\n    from tasks.common import sync\n",
            "task_model/layout.py": '"""See tasks/README.md."""\n\nPATH = Path("tests") / "probes"\n',
        },
    )
    assert reaches_into_tasks(sources_of(root, ("probes", "task_model"))) == ["suite.py:2", "loader.py:5"]


def test_checker_reports_a_bundled_task_s_probe_file_that_imports_twin(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tasks/shop/tests/probes/model.py": "def reference(env):\n    from probes.context import make_context\n",
            "tasks/shop/environment/source/shop.py": "import json\nfrom . import probes\n",
        },
    )
    assert tasks_imports(root / "tasks") == ["tasks/shop/tests/probes/model.py:2 -> probes.context"]


def test_a_folder_on_two_floors_is_reported(tmp_path):
    root = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/low.py": "", "pkg/high.py": "", "pkg/sub/deep.py": ""})
    floors = (("low", ("pkg.low",)), ("high", ("pkg",)))
    assert mixed_folders(sources_of(root, ("pkg",)), floors) == {"pkg": {"low", "high"}}
