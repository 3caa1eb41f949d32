"""The probe-file format, read without executing the file (format: `probes/README.md`).

A probe file defines matched pairs `reference[_NAME]` / `candidate[_NAME]` (with an
optional `inputs[_NAME]`), candidate-only checks `check[_NAME]`, and a literal
`PROBES` dict of metadata per name. `read_probe_file` reads and parses a file once;
its `names` (or `probe_names`, from a path) says which probes the file defines.

Nothing a file states is dropped unread: a probe-like name in another form (assigned,
imported, `probe_NAME`), an `inputs_NAME` without its pair, or `PROBES` metadata for a
probe the file lacks is a `ProbeFileError` that names it and the accepted forms.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIDE_FUNCTIONS = ("reference", "candidate")

PROBE_LIKE = re.compile(r"(reference|candidate|check|inputs|probe)(?:_\w+)?")
"""Module-level names a reader takes for probe functions: the recognised prefixes, and `probe`,
which is no form of its own but the name an author reaches for."""

ACCEPTED_FORMS = (
    "a probe is a pair of module-level functions `def reference_NAME(env)` / `def candidate_NAME(env)` "
    "(with an optional `inputs_NAME`), a candidate-only check is `def check_NAME(env)`, and metadata is "
    "the literal dict `PROBES`; a helper's name starts with `_`"
)
"""The forms a probe file's probes take, as an error that refuses another form states them."""


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

    def unrecognised(self) -> list[str]:
        """Probe-like module-level names (`PROBE_LIKE`) in no accepted form, as `name (line N, how)`.

        The sides call `reference_NAME`, `candidate_NAME` and `check_NAME` by name, and
        blame a crash by its frames in this file: they must be functions defined here
        (an `inputs_NAME`, which runs on the reference side only, may be any callable).
        `probe_NAME` is no form at all.
        """
        found = []
        for node in self.tree.body:
            for name, how in _bindings(node):
                match = PROBE_LIKE.fullmatch(name)
                if not match or (how == "def" and match.group(1) != "probe") or match.group(1) == "inputs":
                    continue
                what = "not a recognised probe function" if match.group(1) == "probe" else how
                found.append(f"{name} (line {node.lineno}, {what})")
        return found

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
        self._refuse_unread(metadata)
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

    def _refuse_unread(self, metadata: dict) -> None:
        """Raise where the file states something no probe would read (see the module docstring)."""
        path, functions = self.path, self.functions
        unrecognised = self.unrecognised()
        if unrecognised:
            listed = ", ".join(unrecognised)
            raise ProbeFileError(f"{path}: not a probe in an accepted form: {listed}; {ACCEPTED_FORMS}")
        pairs = {f.partition("_")[2] for f in functions if re.fullmatch(r"(reference|candidate)(_\w+)?", f)}
        orphans = sorted(
            f"{name} (line {node.lineno})"
            for node in self.tree.body
            for name, _ in _bindings(node)
            if re.fullmatch(r"inputs(_\w+)?", name) and name.partition("_")[2] not in pairs
        )
        if orphans:
            raise ProbeFileError(
                f"{path}: {', '.join(orphans)} has no reference/candidate pair of its name; {ACCEPTED_FORMS}"
            )
        stem = path.stem
        checks = {f.partition("_")[2] for f in functions if re.fullmatch(r"check(_\w+)?", f)}
        known = {p or stem for p in pairs} | {c or stem for c in checks} | {f"check_{c or stem}" for c in checks}
        unknown = sorted(repr(key) for key in metadata if key not in known)
        if unknown:
            have = ", ".join(repr(k) for k in sorted(known)) or "none"
            raise ProbeFileError(
                f"{path}: PROBES names {', '.join(unknown)}, which the file defines no probe for (its probes: "
                f"{have}; an unsuffixed reference/candidate pair or check takes the file's name, {stem!r})"
            )


def _bindings(node: ast.stmt) -> list[tuple[str, str]]:
    """The names a module-level statement binds, each with how: def, class, assigned or imported."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(node.name, "def")]
    if isinstance(node, ast.ClassDef):
        return [(node.name, "a class, not a function")]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [((a.asname or a.name).partition(".")[0], "imported, not defined with def") for a in node.names]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return [(name, "assigned, not defined with def") for name in names]


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

PROBE_FILE_KIND = "probe_file"
"""The kind of the record that a probe file loads and its probes run again, superseding the error
(`probe:<file stem>`, `probe:<file stem>:checks`, ...) it had before: about the probe, not the candidate."""


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
