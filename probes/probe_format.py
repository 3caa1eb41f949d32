"""The probe-file format, read without executing the file (format: `probes/README.md`).

A probe file defines matched pairs `reference[_NAME]` / `candidate[_NAME]` (with an
optional `inputs[_NAME]`), candidate-only checks `check[_NAME]`, and a literal
`PROBES` dict of metadata per name. `probe_names` says which probes a file defines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

SIDE_FUNCTIONS = ("reference", "candidate")


class ProbeFileError(ValueError):
    """A probe file that cannot be read as probes (syntax, missing functions, bad metadata)."""


def probe_names(path: Path, *, checks: bool = False) -> dict[str, dict[str, Any]]:
    """The probes a file defines and their metadata, read without executing it.

    Returns:
        name -> metadata (from the file's `PROBES` dict, where given). The name ''
        stands for the unsuffixed `reference`/`candidate` pair.

    Raises:
        ProbeFileError: syntax error, a `reference_X` without `candidate_X` (or the
            reverse), a `PROBES` that is not a literal dict, or no probe at all.

    With `checks=True`, the candidate-only `check_X` functions are returned instead.
    """
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ProbeFileError(f"{path}: {exc}") from None
    functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    metadata: dict[str, dict] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROBES" for t in node.targets):
            try:
                metadata = ast.literal_eval(node.value)
            except ValueError:
                raise ProbeFileError(f"{path}: PROBES must be a literal dict") from None
            if not isinstance(metadata, dict) or not all(isinstance(v, dict) for v in metadata.values()):
                raise ProbeFileError(f"{path}: PROBES must map probe names to dicts")
    names: dict[str, dict] = {}
    if checks:
        for func in functions:
            match = re.fullmatch(r"check(?:_(\w+))?", func)
            if match:
                name = match.group(1) or ""
                key = name or Path(path).stem
                names[name] = dict(metadata.get(f"check_{key}", metadata.get(key, {})))
        return names
    for side in SIDE_FUNCTIONS:
        other = SIDE_FUNCTIONS[1 - SIDE_FUNCTIONS.index(side)]
        for func in functions:
            match = re.fullmatch(rf"{side}(?:_(\w+))?", func)
            if not match:
                continue
            name = match.group(1) or ""
            if (f"{other}_{name}" if name else other) not in functions:
                raise ProbeFileError(f"{path}: {func} has no matching {other}{'_' + name if name else ''}")
            names[name] = dict(metadata.get(name or Path(path).stem, {}))
    if not names and not any(re.fullmatch(r"check(_\w+)?", f) for f in functions):
        raise ProbeFileError(f"{path}: defines no probe (a pair of functions reference[_name], candidate[_name])")
    return names


PLANTED_KIND = "planted"
"""The kind of a planted-fault copy's property: it examines the probe, not the candidate."""


def property_of(file: Path, name: str, meta: dict[str, Any], *, kind: str, level: int) -> tuple[str, str, int]:
    """(id, kind, level) of one probe's property, from its metadata.

    A copy marked `"planted": True` (a fault planted to show the probe can fail) gets its
    own id, `planted:<id>`, and the kind `planted`: its outcome never stands for the
    property it copies, and no tally, regression or localization counts it.
    """
    default = f"{file.stem}.{name}"
    pid = str(meta.get("id") or (default.rstrip(".") if kind == "differential" else default))
    if meta.get("planted"):
        return f"{PLANTED_KIND}:{pid.removeprefix(PLANTED_KIND + ':')}", PLANTED_KIND, int(meta.get("level", level))
    return pid, str(meta.get("kind", kind)), int(meta.get("level", level))


def stated_ids(path: Path) -> set[str]:
    """The property ids a probe file states (matched probes and checks); empty if it cannot be read."""
    ids: set[str] = set()
    for checks, kind, level in ((False, "differential", 1), (True, "check", 0)):
        try:
            found = probe_names(path, checks=checks)
        except ProbeFileError:
            continue
        ids.update(property_of(path, name, meta, kind=kind, level=level)[0] for name, meta in found.items())
    return ids
