"""The static import closure of a package's modules: what a module needs of its own distribution to import.

`twin task new --include-closure MODULE` lays out this closure as the task's original, and
`twin probe --init --module` ranks a module's components by it. Each file is parsed once with
`ast` (nothing is imported or run): every `import` and `from … import` of the file, at any
depth (a function's own imports run when it is called), is resolved against the
distribution's own modules (relative imports included; `from pkg import name` reaches
`pkg.name` where that is a module); what lies outside the distribution (torch, numpy) is
only named. Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` first, so every
module brings its packages' `__init__` files with it: that chain is where a large package
pulls in everything (`timm/__init__.py` imports every model).

The size is told beside the scale of T2J's tasks (about 4,000 lines in 15 to 20 modules);
above `LARGE_LINES` it names the modules that pull in the most, each with what would leave
the closure without it.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from task_model.model import TaskError

T2J_SCALE = "T2J tasks: about 4,000 lines in 15-20 modules"
LARGE_LINES = 20_000
"""Above this many lines a closure is far from a task's scale: twin warns, naming what pulls in the most."""
HEAVIEST_SHOWN = 3
MAX_MODULE_BYTES = 4 << 20
"""A larger file is counted but not parsed (generated tables, not code a port is about)."""


class ModuleFile(BaseModel):
    """One module of the distribution."""

    name: str = Field(description="Dotted module name (a package by its name, from its __init__.py).")
    path: str = Field(description="Its path in the wheel (or under the laid-out original).")
    lines: int = Field(description="Its lines.")
    torch_lines: int = Field(default=0, description="Lines that name torch or a name imported from it.")
    imports: list[tuple[str, int]] = Field(
        default_factory=list, description="(module of the distribution, line) of each import it makes."
    )
    external: list[str] = Field(default_factory=list, description="Top-level names it imports from elsewhere.")


class Pull(BaseModel):
    """A module that pulls in part of a closure: what would leave it without this module."""

    module: str = Field(description="The module.")
    path: str = Field(description="Its file.")
    via: str = Field(description="Where it is imported: `file:line`, or the package it is the __init__ of.")
    modules: int = Field(description="Modules only it brings in (itself included).")
    lines: int = Field(description="Their lines.")


class Closure(BaseModel):
    """The import closure of some modules of one distribution."""

    roots: list[str] = Field(description="The modules asked for.")
    modules: list[ModuleFile] = Field(description="Every module in the closure, by name.")
    external: list[str] = Field(description="Top-level names imported from outside the distribution.")
    heaviest: list[Pull] = Field(default_factory=list, description="What pulls in the most (a large closure).")

    @property
    def files(self) -> list[str]:
        return sorted(m.path for m in self.modules)

    @property
    def lines(self) -> int:
        return sum(m.lines for m in self.modules)

    @property
    def torch_lines(self) -> int:
        return sum(m.torch_lines for m in self.modules)

    def size_line(self) -> str:
        """`closure of M: N modules, L lines, T using torch (T2J tasks: …)`."""
        return (
            f"closure of {', '.join(self.roots)}: {len(self.modules)} modules, {self.lines:,} lines, "
            f"{self.torch_lines:,} using torch ({T2J_SCALE})"
        )

    def warning_lines(self) -> list[str]:
        """Above `LARGE_LINES`: a warning, then one line per module that pulls in the most."""
        if self.lines <= LARGE_LINES:
            return []
        lines = [
            f"warning: the closure is {self.lines:,} lines, over {LARGE_LINES:,}: a port of it is far beyond a "
            "task's scale; what pulls in the most (--exclude its files, or --include a smaller set):"
        ]
        for pull in self.heaviest:
            brings = f"{pull.modules} modules, {pull.lines:,} lines only through it"
            lines.append(f"  {pull.module} ({pull.path}, {pull.via}): {brings}")
        return lines


def module_name(path: str) -> str | None:
    """`a/b/c.py` -> `a.b.c`, `a/b/__init__.py` -> `a.b`; None for a file that is no importable module."""
    pure = PurePosixPath(path)
    if pure.suffix != ".py" or any(p.endswith((".dist-info", ".data")) for p in pure.parts):
        return None
    parts = list(pure.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def wheel_sources(wheel: Path) -> dict[str, str]:
    """Every Python file of a wheel, path -> text (undecodable bytes replaced)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            info.filename: archive.read(info).decode(errors="replace")[: MAX_MODULE_BYTES + 1]
            for info in archive.infolist()
            if info.filename.endswith(".py") and not info.is_dir()
        }


def tree_sources(root: Path) -> dict[str, str]:
    """Every Python file under a directory (a laid-out original), relative path -> text; links not followed."""
    found = {}
    for path in sorted(Path(root).rglob("*.py")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            found[path.relative_to(root).as_posix()] = path.read_text(errors="replace")[: MAX_MODULE_BYTES + 1]
        except OSError:
            continue
    return found


def read_modules(sources: Mapping[str, str], *, count_torch: bool = True) -> dict[str, ModuleFile]:
    """Each module of `sources` (path -> text), its imports resolved against the others.

    Args:
        count_torch: also count each module's lines using torch (a walk of every expression).
    """
    names = {name: path for path in sources if (name := module_name(path)) is not None}
    modules = {}
    for name, path in names.items():
        text = sources[path]
        modules[name] = _read_module(name, path, text, names, count_torch)
    return modules


def statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement of `tree`, nested ones included, without visiting expressions (an import is one)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                stack += children
        if isinstance(node, ast.stmt):
            yield node


def _read_module(name: str, path: str, text: str, known: Mapping[str, str], count_torch: bool) -> ModuleFile:
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    module = ModuleFile(name=name, path=path, lines=lines)
    if len(text) > MAX_MODULE_BYTES:
        return module
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return module  # the original's, not ours to judge: counted, its imports unknown
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    imports, external, torch_names = [], set(), set()
    for node in statements(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.append(alias.name)
                if alias.name.split(".")[0] == "torch":
                    torch_names.add(alias.asname or "torch")
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            targets.append(base)
            targets += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            if base.split(".")[0] == "torch":
                torch_names |= {a.asname or a.name for a in node.names if a.name != "*"}
        for target in targets:
            resolved = _deepest_known(target, known)
            if resolved is None:
                external.add(target.split(".")[0])
            elif resolved != name:
                imports.append((resolved, node.lineno))
    module.imports = sorted(set(imports), key=lambda item: (item[1], item[0]))
    module.external = sorted(external)
    module.torch_lines = _lines_naming(tree, torch_names) if torch_names and count_torch else 0
    return module


def _absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute module of `from <level dots><module> import …` in `package`."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, *([module] if module else [])]) or None


def _prefixes(target: str) -> list[str]:
    parts = target.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _deepest_known(target: str, known: Mapping[str, str]) -> str | None:
    return next((p for p in _prefixes(target) if p in known), None)


def _lines_naming(tree: ast.AST, names: set[str]) -> int:
    """Distinct lines on which one of `names` (torch, or names imported from it) is used."""
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            used.add(node.lineno)
    return len(used)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _edges(modules: Mapping[str, ModuleFile]) -> dict[str, list[tuple[str, str]]]:
    """Each module's edges: (module it brings, where): its imports, and its packages' __init__ files."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for name, module in modules.items():
        out = [(target, f"imported at {module.path}:{line}") for target, line in module.imports]
        out += [(parent, f"the package of {name}") for parent in _parents(name) if parent in modules]
        edges[name] = out
    return edges


def _reach(roots: Iterable[str], edges: Mapping[str, list[tuple[str, str]]], without: str | None = None) -> set[str]:
    seen: set[str] = set()
    stack = [r for r in roots if r != without]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack += [target for target, _ in edges.get(name, ()) if target != without and target not in seen]
    return seen


def import_closure(sources: Mapping[str, str], roots: list[str]) -> Closure:
    """The closure of `roots` (dotted module names) in `sources` (path -> text).

    Raises:
        KeyError: a root that is no module of `sources` (its name).
    """
    modules = read_modules(sources)
    for root in roots:
        if root not in modules:
            raise KeyError(root)
    edges = _edges(modules)
    reached = _reach(roots, edges)
    chosen = [modules[name] for name in sorted(reached)]
    external = sorted({e for m in chosen for e in m.external})
    closure = Closure(roots=list(roots), modules=chosen, external=external)
    if closure.lines > LARGE_LINES:
        closure.heaviest = _heaviest(roots, modules, edges, reached)
    return closure


def _heaviest(roots, modules, edges, reached: set[str]) -> list[Pull]:
    """The modules whose absence would take the most lines out of the closure (the roots excepted)."""
    total = sum(modules[n].lines for n in reached)
    pulls = []
    for name in reached - set(roots):
        left = _reach(roots, edges, without=name)
        lost = reached - left
        lines = total - sum(modules[n].lines for n in left)
        via = next((where for source in sorted(left) for target, where in edges[source] if target == name), "")
        pulls.append(Pull(module=name, path=modules[name].path, via=via, modules=len(lost), lines=lines))
    pulls.sort(key=lambda p: (-p.lines, p.module))
    return pulls[:HEAVIEST_SHOWN]


def wheel_closure(wheel: Path, roots: list[str]) -> Closure:
    """The closure of `roots` in a wheel's files (`import_closure`)."""
    return import_closure(wheel_sources(wheel), roots)


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p.rstrip("/") + "/") for p in prefixes)


def choose_files(names: list[str], include: list[str], closure: list[str], exclude: list[str]) -> list[str]:
    """The declared files: `include` (files or directories of the wheel) and the closure's, less `exclude`.

    Without `exclude` the included directories stay whole entries; with it every file is listed.

    Raises:
        ValueError: an `exclude` that names nothing in the wheel, or nothing left (one line).
    """
    for wanted in exclude:
        if not any(_under(n, [wanted]) for n in names):
            raise ValueError(f"--exclude {wanted}: the wheel has no such file or directory")
    if not exclude:
        return [*include, *[f for f in closure if not _under(f, include)]]
    kept = [n for n in names if (_under(n, include) or n in set(closure)) and not _under(n, exclude)]
    if not kept:
        raise ValueError("--exclude leaves no file of the original")
    return kept


def wheel_selection(
    roots: list[str], include: list[str], exclude: list[str], say: Callable[[str], None]
) -> Callable[[Path], list[str]] | None:
    """What `twin task new` declares of a wheel: `include`, the closure of `roots`, less `exclude`.

    The closure's size is said (`say`) as soon as it is known, with the warning of a large one;
    the declared files' size too where it differs (includes alone, or files added or taken
    out), with a warning above `LARGE_LINES`. None where nothing is given.
    """
    if not roots and not include and not exclude:
        return None

    def select(wheel: Path) -> list[str]:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
        for wanted in include:
            if not any(_under(n, [wanted]) for n in names):
                raise TaskError(f"--include {wanted}: {wheel.name} has no such file or directory")
        files: list[str] = []
        if roots:
            try:
                closure = wheel_closure(wheel, roots)
            except KeyError as exc:
                raise TaskError(f"--include-closure {exc.args[0]}: {wheel.name} has no such module") from None
            for line in [closure.size_line(), *closure.warning_lines()]:
                say(line)
            files = closure.files
        try:
            chosen = choose_files(names, include, files, exclude)
        except ValueError as exc:
            raise TaskError(str(exc)) from None
        if include or exclude or not roots:
            for line in _declared_size(wheel, chosen, after_closure=bool(roots)):
                say(line)
        return chosen

    return select


def _declared_size(wheel: Path, chosen: list[str], *, after_closure: bool) -> list[str]:
    """The declared files' size beside T2J's scale, and a warning above `LARGE_LINES`."""
    modules = read_modules({p: t for p, t in wheel_sources(wheel).items() if _under(p, chosen)})
    lines = sum(m.lines for m in modules.values())
    torch = sum(m.torch_lines for m in modules.values())
    said = [f"declared: {len(modules)} modules, {lines:,} lines, {torch:,} using torch ({T2J_SCALE})"]
    if lines > LARGE_LINES and not after_closure:
        said.append(
            f"warning: the original is {lines:,} lines, over {LARGE_LINES:,}: a port of it is far beyond a task's "
            "scale; --include-closure MODULE declares only what a module needs to import"
        )
    return said
