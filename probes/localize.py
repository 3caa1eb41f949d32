"""Progressive divergence localization (002, §4.2): name the first divergent component.

The original is read into a module graph (networkx): a node per module, class
and function (`pkg.model.MLP`), an edge `a -> b` when `a` uses `b` (instantiates,
calls or references it) and from every definition to the module that holds it. Probes name the component
they exercise (`PROBES[...]["component"]`), from leaves (a norm, an attention)
up to composed pieces (a block, the model, the loss, a train step, the run).
When probes are violated, the first divergent component is a violated one none
of whose own dependencies is violated: below it everything that was probed
agrees, so the divergence starts there.
"""

from __future__ import annotations

import ast
from pathlib import Path

from evidence_store.records import Outcome, ProbeResult, Property
from probes.audit import python_files
from probes.base import base_context

LOCALIZATION = Property(
    id="localization",
    kind="localization",
    level=2,
    description="The first component of the original whose migrated counterpart diverges.",
)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def module_graph(source: Path):
    """The original's module graph: modules, classes and functions, edges from user to used.

    Returns:
        a `networkx.DiGraph`; node attribute `kind` is 'module', 'class' or 'function'.
    """
    import networkx as nx

    graph = nx.DiGraph()
    parsed = {}
    for path in python_files(source):
        name = _module_name(source, path)
        if not name:
            continue
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        parsed[name] = (tree, path.name == "__init__.py")
        graph.add_node(name, kind="module", package=path.name == "__init__.py")
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                graph.add_node(f"{name}.{node.name}", kind=kind, module=name)
                # A definition depends on its module: when the module cannot even be
                # imported, every definition in it fails with it.
                graph.add_edge(f"{name}.{node.name}", name)
    for name, (tree, is_package) in parsed.items():
        scope = {n.split(".")[-1]: n for n, data in graph.nodes(data=True) if data.get("module") == name}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(name, is_package, node.level, node.module) if node.level else (node.module or "")
                )
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in graph or base in graph:
                        scope[alias.asname or alias.name] = target if target in graph else base
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in graph:
                        scope[alias.asname or alias.name] = alias.name
        for node in tree.body:
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            user = f"{name}.{node.name}"
            for inner in ast.walk(node):
                used = None
                if isinstance(inner, ast.Name) and inner.id in scope:
                    used = scope[inner.id]
                elif isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id in scope:
                    candidate = f"{scope[inner.value.id]}.{inner.attr}"
                    used = candidate if candidate in graph else None
                if used and used != user and used in graph:
                    graph.add_edge(user, used)
    return graph


def _node_for(graph, component: str) -> str | None:
    """The graph node a component names: itself, else the shortest node ending in it, else its deepest prefix."""
    if component in graph:
        return component
    longer = [n for n in graph.nodes if n.endswith("." + component)]
    if longer:
        return min(longer, key=len)
    shorter = [n for n in graph.nodes if component.startswith(n + ".") or component.endswith("." + n)]
    return max(shorter, key=len) if shorter else None


def _depends(graph, upper: str, lower: str) -> bool:
    import networkx as nx

    return upper != lower and nx.has_path(graph, upper, lower)


def localize_divergence(ctx, results: list[ProbeResult]) -> ProbeResult | None:
    """The first divergent component among the violated probes, or None when nothing diverges.

    Args:
        ctx: the probe context (its `source` is read into the module graph).
        results: results of probes that name their `component` (in `context`).
    """
    graph = module_graph(ctx.source)
    violated: dict[str, list[ProbeResult]] = {}
    # A probe that relies on other components besides its own (e.g. the checkpoint
    # converter, to build its inputs) declares them in `uses`: its divergence is
    # explained by theirs when they diverge too.
    for result in results:
        component, uses = result.context.get("component"), result.context.get("uses") or []
        node = _node_for(graph, component) if component else None
        for used in uses:
            target = _node_for(graph, used)
            if node and target and node != target:
                graph.add_edge(node, target)
    established: set[str] = set()
    for result in results:
        component = result.context.get("component")
        if not component:
            continue
        node = _node_for(graph, component) or component
        # A package's __init__ locates nothing more than "somewhere in the package".
        if node in graph and graph.nodes[node].get("package"):
            continue
        if result.outcome is Outcome.VIOLATED:
            violated.setdefault(node, []).append(result)
        elif result.outcome is Outcome.ESTABLISHED:
            established.add(node)
    if not violated:
        return None
    in_graph = [n for n in violated if n in graph]
    first = [n for n in violated if not any(n in graph and o in graph and _depends(graph, n, o) for o in violated)]

    def depth(node: str) -> tuple[int, int]:
        below = len(__import__("networkx").descendants(graph, node)) if node in graph else 10**6
        return (min(r.property.level for r in violated[node]), below)

    first.sort(key=depth)
    chosen = first[0]
    chain = sorted(in_graph, key=lambda n: len(__import__("networkx").descendants(graph, n)))
    below = sorted(n for n in established if chosen in graph and n in graph and _depends(graph, chosen, n))
    probes = [r.property.id for r in violated[chosen]]
    message = f"first divergent component: {chosen} (violated: {', '.join(probes)})"
    if below:
        message += f"; agrees below it: {', '.join(below)}"
    context = base_context(ctx, "probes.localize:localization_probe")
    context["component"] = chosen
    return ProbeResult(
        property=LOCALIZATION,
        outcome=Outcome.VIOLATED,
        context=context,
        observations={
            "component": chosen,
            "candidates": first,
            "violated_components": chain,
            "established_below": below,
            "probes": probes,
            "message": message,
        },
    )


def localization_probe(task_library: bool = True, probe_files: list[str] | None = None):
    """A probe that runs the task's probes (and given files) and localizes any divergence."""

    def probe(ctx) -> list[ProbeResult]:
        from probes.suite import load_probe_file, run_probes, task_probes

        probes = task_probes(ctx.task) if task_library else []
        for path in probe_files or []:
            probes.extend(load_probe_file(path))
        found = localize_divergence(ctx, run_probes(ctx, probes))
        return [found] if found is not None else []

    return probe
