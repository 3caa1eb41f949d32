"""The probe-file format, read without executing the file (format: `probes/README.md`).

A probe file defines matched pairs `reference[_NAME]` / `candidate[_NAME]` (with an
optional `inputs[_NAME]`), candidate-only checks `check[_NAME]`, and a literal
`PROBES` dict of metadata per name. `read_probe_file` reads and parses a file once;
its `names` (or `probe_names`, from a path) says which probes the file defines.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIDE_FUNCTIONS = ("reference", "candidate")


class ProbeFileError(ValueError):
    """A probe file that cannot be read as probes (syntax, missing functions, bad metadata)."""


@dataclass(frozen=True)
class ProbeFile:
    """A probe file read and parsed once: what the sides run, and what it defines.

    The bytes are kept so that the copy the sides run is the very text that was parsed.
    """

    path: Path
    data: bytes
    tree: ast.Module

    @property
    def functions(self) -> set[str]:
        """The names of its module-level functions."""
        return {node.name for node in self.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def literal(self, name: str) -> Any:
        """The value of the module-level literal `name` (`PROBES`, `SERVICES`), None where it is not assigned.

        Raises:
            ProbeFileError: `name` is assigned something other than a literal.
        """
        value = None
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    raise ProbeFileError(f"{self.path}: {name} must be a literal dict") from None
        return value

    def names(self, *, checks: bool = False) -> dict[str, dict[str, Any]]:
        """The probes the file defines and their metadata, by name (see `probe_names`)."""
        path, functions = self.path, self.functions
        metadata = self.literal("PROBES")
        if metadata is None:
            metadata = {}
        elif not isinstance(metadata, dict) or not all(isinstance(v, dict) for v in metadata.values()):
            raise ProbeFileError(f"{path}: PROBES must map probe names to dicts")
        names: dict[str, dict] = {}
        if checks:
            for func in functions:
                match = re.fullmatch(r"check(?:_(\w+))?", func)
                if match:
                    name = match.group(1) or ""
                    key = name or path.stem
                    names[name] = dict(metadata.get(f"check_{key}", metadata.get(key, {})))
            return dict(sorted(names.items()))
        for side in SIDE_FUNCTIONS:
            other = SIDE_FUNCTIONS[1 - SIDE_FUNCTIONS.index(side)]
            for func in functions:
                match = re.fullmatch(rf"{side}(?:_(\w+))?", func)
                if not match:
                    continue
                name = match.group(1) or ""
                if (f"{other}_{name}" if name else other) not in functions:
                    raise ProbeFileError(f"{path}: {func} has no matching {other}{'_' + name if name else ''}")
                names[name] = dict(metadata.get(name or path.stem, {}))
        if not names and not any(re.fullmatch(r"check(_\w+)?", f) for f in functions):
            raise ProbeFileError(f"{path}: defines no probe (a pair of functions reference[_name], candidate[_name])")
        return dict(sorted(names.items()))


def read_probe_file(path: Path | str) -> ProbeFile:
    """Read and parse a probe file once, without executing it.

    Raises:
        ProbeFileError: the file cannot be read or does not parse.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
        tree = ast.parse(data.decode(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ProbeFileError(f"{path}: {exc}") from None
    return ProbeFile(path, data, tree)


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
    return read_probe_file(path).names(checks=checks)


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
    try:
        file = read_probe_file(path)
    except ProbeFileError:
        return ids
    for checks, kind, level in ((False, "differential", 1), (True, "check", 0)):
        try:
            found = file.names(checks=checks)
        except ProbeFileError:
            continue
        ids.update(property_of(path, name, meta, kind=kind, level=level)[0] for name, meta in found.items())
    return ids
