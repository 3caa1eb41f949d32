"""A probe-file skeleton of an original repository (`twin probe --init FILE`).

Writing the probe file is the real work of a task: this gives its required parts
(probes/README.md) for each public class and function of the original, found by
reading its source with libcst (nothing is imported or run). Each probe's sides
raise `NotImplementedError` until filled in: twin reports such a probe as not
established (a crash in the probe's own code), never as violated, so the file is
accepted as it is and shows what remains to write.
"""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
from pydantic import BaseModel, Field

from probes.audit_base import python_files
from probes.layout import dotted_name

MAX_PROBES = 24
"""Components given a probe of their own; the rest are listed in a comment."""
SKIPPED_PARTS = {"tests", "test", "docs", "examples", "scripts", "build", "dist", "setup.py", "conftest.py"}


class Component(BaseModel):
    """A public class or function of the original."""

    module: str = Field(description="Dotted module name, relative to the original's root.")
    name: str = Field(description="The class or function name.")
    kind: str = Field(description="'class' or 'function'.")
    signature: str = Field(description="Its parameters as written (a class: its __init__'s).")
    methods: list[str] = Field(default_factory=list, description="A class's public methods with their parameters.")

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def probe_name(self) -> str:
        return re.sub(r"\W", "_", f"{self.module}_{self.name}").lower()


def public_components(source: Path) -> list[Component]:
    """The public classes and functions of every public module under `source`, in file order.

    A file that does not parse is skipped (it is the original's, not ours to judge).
    """
    files = []
    for path in sorted(python_files(source)):
        rel = path.relative_to(source)
        if any(part.startswith((".", "_")) and part != "__init__.py" for part in rel.parts):
            continue
        if SKIPPED_PARTS & set(rel.parts) or rel.name.startswith("test_"):
            continue
        files.append(path)
    return components_of_files(source, files)


def components_of_files(source: Path, files: list[Path]) -> list[Component]:
    """The public classes and functions of `files` (under `source`), in the order given."""
    found = []
    for path in files:
        rel = path.relative_to(source)
        try:
            tree = cst.parse_module(path.read_text(errors="replace"))
        except (cst.ParserSyntaxError, ValueError, OSError):
            continue
        module = dotted_name(rel) or source.name  # a top-level __init__.py: the package itself
        found += _components(tree, module)
    return found


def _components(tree: cst.Module, module: str) -> list[Component]:
    def code(params: cst.Parameters) -> str:  # on one line, whatever its layout in the source
        return re.sub(r",\s*$", "", " ".join(tree.code_for_node(params).split()))

    found = []
    for node in tree.body:
        if isinstance(node, cst.FunctionDef) and not node.name.value.startswith("_"):
            found.append(Component(module=module, name=node.name.value, kind="function",
                                   signature=code(node.params)))  # fmt: skip
        elif isinstance(node, cst.ClassDef) and not node.name.value.startswith("_"):
            init, methods = "", []
            for item in node.body.body:
                if not isinstance(item, cst.FunctionDef):
                    continue
                if item.name.value == "__init__":
                    init = code(item.params)
                elif not item.name.value.startswith("_") or item.name.value == "__call__":
                    methods.append(f"{item.name.value}({code(item.params)})")
            found.append(Component(module=module, name=node.name.value, kind="class", signature=init,
                                   methods=methods))  # fmt: skip
    return found


def probe_skeleton(source: Path, source_mount: str = "/source", components: list[Component] | None = None) -> str:
    """The text of a probe file with one probe per public component of `source` (module docstring).

    Args:
        components: the components to write probes for, in this order (default: every public
            one of `source`, in file order; `probes.skeleton_focus` aims them at modules).
    """
    components = public_components(Path(source)) if components is None else components
    chosen, rest = components[:MAX_PROBES], components[MAX_PROBES:]
    lines = [
        f'"""Probes of the original in {source_mount}: a skeleton written by `twin probe --init`.',
        "",
        "Fill in each probe (format: probes/README.md): `reference_NAME` runs against the original",
        "(torch present, the original importable), `candidate_NAME` against the port (torch absent),",
        "both on the inputs `inputs_NAME` draws; both return the same named outputs. Until a probe",
        "is filled in it raises NotImplementedError, which twin reports as not established.",
        "Delete the probes you do not need; a probe file needs at least one reference/candidate pair.",
        '"""',
        "",
        "PROBES = {",
    ]
    for i, c in enumerate(chosen):
        hints = [
            "  # 0 structure, 1 module, 2 composed/loss/grads, 3 end-to-end",
            "  # say what it must keep",
            "  # the original's component it exercises (localization)",
        ] if i == 0 else ["", "", ""]  # fmt: skip
        lines += [
            f'    "{c.probe_name}": {{',
            f'        "level": 1,{hints[0]}',
            f'        "description": "{c.dotted} behaves as in the original.",{hints[1]}',
            f'        "component": "{c.dotted}",{hints[2]}',
        ]
        if i == 0:
            lines += [
                '        # "uses": ["pkg.checkpoint.load"],  # other components its outcome depends on',
                '        # "compare": {"logits": "distributional"},  # default: chosen by each output\'s shape',
            ]
        lines += ["    },"]
    lines += ["}", ""]
    if not chosen:
        lines += ["# No public class or function was found: write your probes here (probes/README.md).", ""]
        lines += ["", ""] + _probe("example", "the original", "")
    for c in chosen:
        shown = f"{c.dotted}({c.signature})" if c.kind == "function" else f"class {c.dotted}({c.signature})"
        lines += ["", "", f"# {shown}"]
        lines += [f"#     .{m}" for m in c.methods[:8]]
        lines += _probe(c.probe_name, c.dotted, c.module)
    if rest:
        lines += ["", "# Not given a probe here (add those that matter):"]
        lines += [f"#   {c.dotted}" for c in rest]
    return "\n".join(lines) + "\n"


def _probe(name: str, dotted: str, module: str) -> list[str]:
    imported = f"from {module} import {dotted.rsplit('.', 1)[-1]}" if module else "import ..."
    todo = f"fill in {{}}_{name} (probes/README.md)"
    return [
        f"# def inputs_{name}(env):",
        '#     return {"x": env.rng.standard_normal((2, 4)).astype("float32")}',
        "",
        "",
        f"def reference_{name}(env):",
        f"    # {imported}",
        "    # import torch",
        f"    # out = ...  # run {dotted} on env.inputs, in env.dtype",
        '    # return {"out": out.detach().numpy()}',
        f'    raise NotImplementedError("{todo.format("reference")}")',
        "",
        "",
        f"def candidate_{name}(env):",
        "    # import the port's counterpart (torch is absent here)",
        '    # return {"out": numpy.asarray(out)}',
        f'    raise NotImplementedError("{todo.format("candidate")}")',
    ]
