"""Transliteration: a candidate file that restates an original file statement for statement.

Both files are parsed and reduced to a sequence of normalized statements:
imports, docstrings and `pass` dropped; every name bound to a numerical framework
(torch, jax, flax, numpy, optax, ...) replaced by `FW`, and every attribute chain
rooted there cut to `FW.<last attribute>`, so `torch.tanh`, `F.tanh` and
`jnp.tanh` read alike; `forward` read as `__call__`; compound statements reduced
to their header (`def f(x, y)`, `for i in range(n)`), their bodies following.

Only original files that use the source framework are compared (a file without
torch needs no migration; keeping it verbatim is right). Two coverages are
measured, each the fraction of the original's statements that appear in the
candidate's file in the same order (longest matching blocks): over all
statements, and over the statements that use the source framework. A native
rewrite restates plumbing (a `return x`, a loop header) but re-expresses the
framework statements; a transliteration restates both. A file is flagged when
both coverages reach `MIN_COVERAGE` and the original has at least
`MIN_FRAMEWORK_STATEMENTS` framework statements (fewer are too few to tell).
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

from probes.audit_base import python_files, read_source

FRAMEWORKS = {
    "torch",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "numpy",
    "haiku",
    "equinox",
    "chex",
    "orbax",
    "einops",
}
MIN_COVERAGE = 0.6
MIN_FRAMEWORK_STATEMENTS = 5


@dataclass(frozen=True)
class Transliteration:
    candidate_file: str
    source_file: str
    coverage: float
    framework_coverage: float
    statements: int
    first_line: int


class _Normalizer(ast.NodeTransformer):
    def __init__(self, aliases: set[str]) -> None:
        self.aliases = aliases

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.aliases:
            return ast.copy_location(ast.Name(id="FW", ctx=node.ctx), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.aliases:
            return ast.copy_location(
                ast.Attribute(
                    value=ast.Name(id="FW", ctx=ast.Load()), attr=node.attr, ctx=node.ctx
                ),
                node,
            )
        self.generic_visit(node)
        return node


def framework_aliases(
    tree: ast.Module, forbidden: list[str], *, roots: set[str] | None = None
) -> set[str]:
    """Names a module binds to a numerical framework (or to `roots`) by importing it."""
    roots = roots if roots is not None else FRAMEWORKS | set(forbidden)
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in roots:
                    aliases.add(alias.asname or alias.name.split(".")[0])
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots
        ):
            for alias in node.names:
                aliases.add(alias.asname or alias.name)
    return aliases


def _header(node: ast.stmt) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = "__call__" if node.name == "forward" else node.name
        return f"def {name}({ast.unparse(node.args)})"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}"
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}"
    if isinstance(node, (ast.While, ast.If)):
        return f"{type(node).__name__.lower()} {ast.unparse(node.test)}"
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return "with " + ", ".join(ast.unparse(item) for item in node.items)
    if isinstance(node, ast.Try):
        return "try"
    return type(node).__name__


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _uses(node: ast.stmt, names: set[str]) -> bool:
    parts: list[ast.AST] = [node]
    if any(getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
        parts = [
            getattr(node, f)
            for f in ("test", "iter", "args", "items")
            if getattr(node, f, None) is not None
        ]
        parts = [p for part in parts for p in (part if isinstance(part, list) else [part])]
    return any(isinstance(n, ast.Name) and n.id in names for part in parts for n in ast.walk(part))


def statements(text: str, forbidden: list[str]) -> list[tuple[str, int, bool]]:
    """Normalized statements of a module: (text, line, uses the source framework).

    Empty if the module does not parse.
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    source_names = framework_aliases(tree, [], roots=set(forbidden))
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            node._twin_uses = _uses(node, source_names)  # type: ignore[attr-defined]
    tree = _Normalizer(framework_aliases(tree, forbidden)).visit(tree)
    out: list[tuple[str, int, bool]] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) or _is_docstring(node):
                continue
            children = [
                getattr(node, f) for f in ("body", "orelse", "finalbody") if getattr(node, f, None)
            ]
            if children or isinstance(node, ast.Try):
                out.append((_header(node), node.lineno, getattr(node, "_twin_uses", False)))
                for handler in getattr(node, "handlers", []):
                    walk(handler.body)
                for child in children:
                    walk(child)
            else:
                out.append((ast.unparse(node), node.lineno, getattr(node, "_twin_uses", False)))

    walk(tree.body)
    return out


def coverage(source: list[str], candidate: list[str], only: list[bool] | None = None) -> float:
    """Fraction of `source` statements (those flagged in `only`, if given) found in `candidate` in order."""
    counted = [i for i in range(len(source)) if only is None or only[i]]
    if not counted:
        return 0.0
    matcher = difflib.SequenceMatcher(a=source, b=candidate, autojunk=False)
    matched: set[int] = set()
    for block in matcher.get_matching_blocks():
        matched.update(range(block.a, block.a + block.size))
    return sum(i in matched for i in counted) / len(counted)


def find_transliterations(
    candidate: Path, source: Path, *, forbidden: list[str]
) -> list[Transliteration]:
    """Candidate files that restate a framework-using original file (best match per candidate file)."""
    originals = []
    for path in python_files(source):
        stmts = statements(read_source(path), forbidden)
        flags = [uses for _, _, uses in stmts]
        if sum(flags) >= MIN_FRAMEWORK_STATEMENTS:
            originals.append((str(path.relative_to(source)), [s for s, _, _ in stmts], flags))
    found = []
    for path in python_files(candidate):
        stmts = statements(read_source(path), forbidden)
        if not stmts:
            continue
        texts = [s for s, _, _ in stmts]
        best = None
        for name, original, flags in originals:
            overall = coverage(original, texts)
            framework = coverage(original, texts, flags)
            if min(overall, framework) >= MIN_COVERAGE and (best is None or overall > best[1]):
                best = (name, overall, framework, len(original))
        if best is not None:
            found.append(Transliteration(str(path.relative_to(candidate)), *best, stmts[0][1]))
    return found
