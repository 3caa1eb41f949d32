"""Progressive divergence localization (002, §4.2): name the first divergent component.

The original is read into a module graph (networkx): a node per module, class,
method and function (`pkg.model.MLP`, `pkg.model.MLP.forward`), an edge `a -> b`
when `a` uses `b` (instantiates, calls or references it, `self.b()` included),
from every class to its methods and from every definition to the module that
holds it. Probes name the component they exercise (`PROBES[...]["component"]`),
from leaves (a norm, an attention) up to composed pieces (a block, the model,
the loss, a train step, the run). When probes are violated, the first divergent
component is a violated one none of whose own dependencies is violated: below it
everything that was probed agrees, so the divergence starts there. Among several
such, the lowest level wins, then the one the fewest established differential probes rely on
(a converter every agreeing forward probe loads its weights through is less
suspect than one no agreeing probe touches), then the one the most violated probes
rely on, then the one with the least below it.

The original often delegates to its framework (an optimizer's step, a scheduler, a loss).
Each reference run records the framework functions the original's code called
(`probes/reference_trace.py`). A probe whose component names such a function
(`torch.optim.AdamW.step`) becomes a node below each component that called it, so when
it diverges on inputs both sides share, localization names the framework call
(`torch.optim.AdamW.step`, called from `litgpt.finetune.lora.fit`) rather than the code
around it; without such a probe, the divergent component's own framework calls are listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from evidence_store.records import Outcome, ProbeResult, Property
from probes.audit_base import python_files
from probes.base import base_context
from probes.layout import dotted_name
from probes.probe_format import PLANTED_KIND
from probes.suite import load_probe_file, run_probes, task_probes

LOCALIZATION = Property(
    id="localization",
    kind="localization",
    level=2,
    description="The first component of the original whose migrated counterpart diverges.",
)


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def module_graph(source: Path):
    """The original's module graph: modules, classes, methods and functions, edges from user to used.

    Returns:
        a `networkx.DiGraph`; node attribute `kind` is 'module', 'class', 'method' or 'function'.
    """
    import networkx as nx

    graph = nx.DiGraph()
    parsed = {}
    # Each module's top-level definitions by their bare name (methods are reached through
    # `self.` or their class, never by a bare name).
    defined: dict[str, dict[str, str]] = {}
    for path in python_files(source):
        name = dotted_name(path.relative_to(source))
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
                defined.setdefault(name, {})[node.name] = f"{name}.{node.name}"
                # A definition depends on its module: when the module cannot even be
                # imported, every definition in it fails with it.
                graph.add_edge(f"{name}.{node.name}", name)
                for method in _methods(node):
                    graph.add_node(f"{name}.{node.name}.{method.name}", kind="method", module=name)
                    graph.add_edge(f"{name}.{node.name}", f"{name}.{node.name}.{method.name}")
    for name, (tree, is_package) in parsed.items():
        scope = dict(defined.get(name, {}))
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
            _add_uses(graph, user, node, scope, None)
            for method in _methods(node):
                _add_uses(graph, f"{user}.{method.name}", method, scope, user)
    return graph


def _methods(node: ast.AST) -> list:
    if not isinstance(node, ast.ClassDef):
        return []
    return [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _add_uses(graph, user: str, node: ast.AST, scope: dict[str, str], owner: str | None) -> None:
    """Edges from `user` to what its body names; `owner` is the class of a method (for `self.x`)."""
    import networkx as nx

    for inner in ast.walk(node):
        used = None
        if isinstance(inner, ast.Name) and inner.id in scope:
            used = scope[inner.id]
        elif isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
            if inner.value.id in scope:
                used = f"{scope[inner.value.id]}.{inner.attr}"
            elif owner and inner.value.id == "self":
                used = f"{owner}.{inner.attr}"
        if not used or used == user or used not in graph or graph.has_edge(user, used):
            continue
        # Never close a cycle (a method using its own class): the localizer needs an order.
        if not nx.has_path(graph, used, user):
            graph.add_edge(user, used)


def _node_for(graph, component: str) -> str | None:
    """The graph node a component names.

    Itself; else the shortest node ending in it; else, for `module.name`, a method
    `module.Class.name` of that module (a method the migration made a function);
    else its deepest prefix.
    """
    if component in graph:
        return component
    longer = [n for n in graph.nodes if n.endswith("." + component)]
    if longer:
        return min(longer, key=len)
    module, _, last = component.rpartition(".")
    same_name = [
        n
        for n, data in graph.nodes(data=True)
        if data.get("kind") == "method" and data.get("module") == module and n.rpartition(".")[2] == last
    ]
    if len(same_name) == 1:
        return same_name[0]
    shorter = [n for n in graph.nodes if component.startswith(n + ".") or component.endswith("." + n)]
    return max(shorter, key=len) if shorter else None


def _depends(graph, upper: str, lower: str) -> bool:
    """Whether `lower` lies strictly below `upper` (components on a cycle are peers)."""
    import networkx as nx

    return upper != lower and nx.has_path(graph, upper, lower) and not nx.has_path(graph, lower, upper)


def localize_divergence(ctx, results: list[ProbeResult]) -> ProbeResult | None:
    """The first divergent component among the violated probes, or None when nothing diverges.

    Args:
        ctx: the probe context (its `source` is read into the module graph).
        results: results of probes that name their `component` (in `context`).
    """
    found = localize(ctx.source, results)
    if found is None:
        return None
    context = base_context(ctx, "probes.localize:localization_probe")
    context["component"] = found["component"]
    return ProbeResult(property=LOCALIZATION, outcome=Outcome.VIOLATED, context=context, observations=found)


def localize(source: Path, results: list[ProbeResult]) -> dict | None:
    """Where the divergence starts, from results over the original at `source`; None when none diverges.

    Returns:
        {"component": the first divergent one, "candidates": every violated component with
        nothing violated below it (best first), "violated_components", "established_below"
        (components cleared below it), "probes" (violated probes naming it), "message"}.
    """
    import networkx as nx

    graph = module_graph(source)
    calls = _framework_calls(graph, results)
    # Each probe's component and what it `uses`, as graph nodes where the graph has them.
    resolved = [
        (
            result,
            _node_for(graph, result.context["component"]) or result.context["component"],
            [_node_for(graph, u) or u for u in result.context.get("uses") or []],
        )
        for result in results
        if result.context.get("component") and result.property.kind != PLANTED_KIND  # planted: about the probe
    ]
    _place_framework(graph, resolved, calls)
    # A probe that relies on other components besides its own (e.g. the checkpoint
    # converter, to build its inputs) declares them in `uses`: its divergence is
    # explained by theirs when they diverge too. A name the original lacks (a converter
    # only the candidate has) becomes a component of its own, below those that use it.
    for _, node, uses in resolved:
        for used in uses:
            if node in graph and node != used:
                if used not in graph:
                    graph.add_node(used, kind="candidate_only")
                graph.add_edge(node, used)
    violated: dict[str, list[ProbeResult]] = {}
    established: dict[str, set] = {}  # component -> the modes (PROBES "mode") its agreeing probes ran in
    support: dict[str, int] = {}
    implicated: dict[str, int] = {}
    for result, node, uses in resolved:
        # Only a comparison with the original can clear a component: a candidate-side
        # check that passes (a parameter tree, a trace under jit) says nothing of its values.
        clears = result.property.kind == "differential"
        tally = {Outcome.ESTABLISHED: support if clears else None, Outcome.VIOLATED: implicated}.get(
            result.outcome
        )
        if tally is not None:
            for used in {node, *uses}:
                tally[used] = tally.get(used, 0) + 1
        # A package's __init__ locates nothing more than "somewhere in the package".
        if node in graph and graph.nodes[node].get("package"):
            continue
        if result.outcome is Outcome.VIOLATED:
            violated.setdefault(node, []).append(result)
        elif result.outcome is Outcome.ESTABLISHED:
            established.setdefault(node, set()).add(result.context.get("mode"))
    if not violated:
        return None
    in_graph = [n for n in violated if n in graph]
    first = [n for n in violated if not any(n in graph and o in graph and _depends(graph, n, o) for o in violated)]

    def depth(node: str) -> tuple[int, int, int, int]:
        below = len(nx.descendants(graph, node)) if node in graph else 10**6
        level = min(r.property.level for r in violated[node])
        return (level, support.get(node, 0), -implicated.get(node, 0), below)

    first.sort(key=depth)
    chosen = first[0]
    chain = sorted(in_graph, key=lambda n: len(nx.descendants(graph, n)))
    # Only a probe that ran the way the violated ones did clears what lies below: an
    # eval-mode forward says nothing of a bug that shows after a training step.
    modes = {r.context.get("mode") for r in violated[chosen]}
    below = sorted(
        n for n, ran in established.items()
        if ran & modes and chosen in graph and n in graph and _depends(graph, chosen, n)
    )  # fmt: skip
    probes = [r.property.id for r in violated[chosen]]
    framework = chosen in graph and graph.nodes[chosen].get("kind") == "framework"
    called_from = sorted(graph.predecessors(chosen)) if framework else []
    where = f" (called from {', '.join(called_from)})" if called_from else ""
    message = f"first divergent component: {chosen}{where} (violated: {', '.join(probes)})"
    if below:
        message += f"; agrees below it: {', '.join(below)}"
    if delegated := [] if framework else _delegated(chosen, violated[chosen]):
        message += f"; it calls into the framework: {', '.join(delegated)}"
    return {
        "component": chosen,
        "candidates": first,
        "violated_components": chain,
        "established_below": below,
        "probes": probes,
        "message": message,
        "framework": framework,
        "called_from": called_from,
        "framework_calls": delegated,
    }


FRAMEWORK_CALLS_SHOWN = 8
"""Framework functions listed as those a divergent component calls."""


def _same_function(name: str, other: str) -> bool:
    """Whether two names name one framework function (`torch.optim.adamw.AdamW.step`, `torch.optim.AdamW.step`)."""
    a, b = name.split("."), other.split(".")
    return name == other or (a[0] == b[0] and min(len(a), len(b)) > 1 and a[-2:] == b[-2:])


def _framework_calls(graph, results: list[ProbeResult]) -> list[tuple[str, str]]:
    """(framework function, the original's component that called it) from the results' reference runs."""
    found = []
    for result in results:
        for call in result.reference_run.calls if result.reference_run is not None else []:
            caller = _node_for(graph, call.caller) if call.caller != "probe" else None
            if caller is not None:
                found.append((call.name, caller))
    return list(dict.fromkeys(found))


def _place_framework(graph, resolved: list, calls: list[tuple[str, str]]) -> None:
    """A probe's component (or `uses`) that names a framework function the original calls becomes a node below
    each of the original's components that called it: its own probe, given the same inputs on both sides, is
    what tells a divergence inside it from one in the code around it."""
    for _, node, uses in resolved:
        for name in (node, *uses):
            if name in graph and graph.nodes[name].get("kind") != "framework":
                continue
            callers = [caller for called, caller in calls if _same_function(name, called) and caller != name]
            if callers:
                graph.add_node(name, kind="framework")
                for caller in callers:
                    graph.add_edge(caller, name)


def _delegated(component: str, violated: list[ProbeResult]) -> list[str]:
    """The framework functions that the component's own code called in its violated probes' reference runs."""
    found = [
        call.name
        for result in violated
        for call in (result.reference_run.calls if result.reference_run is not None else [])
        if call.caller == component or call.caller.startswith(component + ".")
    ]
    return list(dict.fromkeys(found))[:FRAMEWORK_CALLS_SHOWN]


def localization_probe(own_probes: bool = True, probe_files: list[str] | None = None):
    """A probe that runs the task's own probes (`probes.suite.task_probes`) and given files; localizes a divergence."""

    def probe(ctx) -> list[ProbeResult]:
        probes = task_probes(ctx.task) if own_probes else []
        for path in probe_files or []:
            probes.extend(load_probe_file(path))
        found = localize_divergence(ctx, run_probes(ctx, probes))
        return [found] if found is not None else []

    return probe


def localization_verdict(found: str | None, wanted: str, source: Path, candidate: Path) -> str:
    """How well a localized component names a known defective one (scoring seeded defects).

    Args:
        found: the component the localization named (a node of the original's graph).
        wanted: where the defect lives, as a dotted name in the candidate, with or
            without its top-level package ('checkpoint.to_state_dict').
        source: the original repository (its graph holds `found`).
        candidate: the candidate the defect was applied to, e.g. the oracle (its graph holds `wanted`).

    Returns:
        'exact': `found` is the defective component, a definition holding it (a
        class around a method), or a part of a defective module;
        'counterpart': the defect lives in a candidate helper the original does not
        have, and `found` is an original definition whose migrated counterpart
        calls that helper directly (`to_state_dict` under `save_checkpoint`);
        'module': only the module is right; 'no': otherwise.
    """
    if not found:
        return "no"
    src, cand = module_graph(source), module_graph(candidate)
    wanted = _qualify(cand, wanted)
    if wanted in src or wanted in cand:
        target = wanted
    else:
        target = _node_for(src, wanted) or _node_for(cand, wanted) or wanted
    if target not in src:
        # A function the migration made of a method (`model.hidden_states` for
        # `model.MLPClassifier.hidden_states`) is that method in the original.
        same = _node_for(src, target)
        if same is not None and src.nodes[same].get("kind") == "method":
            target = same
    found_node = _node_for(src, found) or found

    def kind(graph, node: str) -> str:
        return graph.nodes[node].get("kind", "") if node in graph else ""

    if found_node == target or found_node.startswith(target + "."):
        return "exact"
    if target.startswith(found_node + ".") and kind(src, found_node) in ("class", "function", "method"):
        return "exact"
    if target in cand and target not in src and found_node in cand and cand.has_edge(found_node, target):
        return "counterpart"

    def module_of(node: str) -> str:
        for graph in (src, cand):
            if node in graph:
                return graph.nodes[node].get("module") or node
        return node.rsplit(".", 1)[0]

    return "module" if module_of(found_node) == module_of(target) else "no"


def _qualify(graph, name: str) -> str:
    """`name` with its top-level package put in front when it was left out."""
    if name in graph or name.split(".")[0] in graph:
        return name
    for top in sorted(n for n in graph.nodes if "." not in n):
        if f"{top}.{name.split('.')[0]}" in graph:
            return f"{top}.{name}"
    return name
