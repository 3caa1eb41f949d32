"""What in a reference environment could stand in for the held torch, whatever its distribution is called.

A dependency's name says nothing about the files its wheel installs: a wheel named
anything may ship a top-level `torch/`, `torch.py` or `torch.cpython-….so`, which the
reference side (the environment's site-packages first on `PYTHONPATH`) would import
instead of the held torch. A `.pth` file is read by every interpreter whose site
directory holds it (the environment's own, the image `twin task new` writes, which
installs the same lock): a path line can put another torch on the path, and a line
starting with `import` runs code that can put anything anywhere. A `sitecustomize` or
`usercustomize` module runs at every start of an interpreter that finds it on its path,
`PYTHONPATH` included. And `PYTHONPATH` comes before the standard library: a top-level entry
named like one of its modules (`json`, `typing`) is what the driver, torch itself and
everything else import by that name, so it runs before or inside the held torch whatever the
original imports (a `sys.modules["torch"]` of its own, say).

So `shadowing` reads the environment's installed files, not its names: every top-level
entry of its site-packages whose module name is torch, one of the start-up hooks or a module
of the standard library, and every `.pth` line that runs code or leads outside the environment
(twin's own lines to its interpreter's site-packages excepted) or to a folder holding a torch
(read as each interpreter reads it: `_pth_shadowing`). Each finding is
named by the distribution whose installed RECORD lists the file.
"""

from __future__ import annotations

import csv
import importlib.machinery
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from task_model.reference_lock import PINNED

BASE_PTH = "twin-base.pth"
"""The `.pth` twin writes into each environment: twin's interpreter's site-packages, where the held torch is."""

START_HOOKS = ("sitecustomize", "usercustomize")
"""Modules Python imports by itself at start-up wherever they are on the path."""

_SUFFIXES = tuple(sorted(set(importlib.machinery.all_suffixes()), key=len, reverse=True))
COMMANDS = re.compile(r"python[0-9.]*|pythonw|sh|bash|dash|env")
"""Commands no dependency's script may be named: where its scripts come first on the PATH (the image
`twin task new` writes installs the lock into `/usr/local/bin`), one would run in place of the
interpreter or the shell that runs the grader, and could put anything in `sys.modules` first."""
_PTH_LIMIT = 1 << 20
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")
"""Where Python up to 3.12 ends a `.pth` line (universal newlines); 3.13 also ends one at `str.splitlines`' others."""


def module_name(entry: str) -> str | None:
    """The module a top-level site-packages entry imports as (`torch.cpython-311-x86_64-linux-gnu.so` ->
    `torch`), or None for an entry that is not importable by its name (`.pth`, `.dist-info`, `.data`)."""
    for suffix in _SUFFIXES:
        if entry.endswith(suffix):
            return entry[: -len(suffix)].split(".")[0]
    if "." in entry:
        return None
    return entry


def holds_torch(folder: Path) -> str | None:
    """The entry of `folder` that imports as torch, or None (also where it cannot be listed)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    return next((name for name in names if module_name(name) == PINNED), None)


def shadowing(site: Path, base_lines: list[str]) -> str | None:
    """Why the environment whose site-packages is `site` could shadow the held torch, or None.

    Args:
        site: the environment's site-packages.
        base_lines: the lines twin wrote into its own `BASE_PTH` (it must still hold exactly these).

    Returns:
        One line naming the entry and the distribution that installed it, or None.
    """
    root = site.resolve()
    for entry in sorted(os.listdir(site)):
        module = module_name(entry)
        if module == PINNED:
            return f"{_shipped(site, entry)} installs a top-level {entry}, which imports as {PINNED}"
        if module in START_HOOKS:
            return f"{_shipped(site, entry)} installs {entry}, which Python runs at every start"
        if module in sys.stdlib_module_names:
            return (
                f"{_shipped(site, entry)} installs a top-level {entry}, which imports instead of the standard"
                f" library's {module} (first on the path, it runs for whatever imports {module}, {PINNED} included)"
            )
        if entry.endswith(".pth"):
            why = _pth_shadowing(site, root, entry, base_lines)
            if why is not None:
                return f"{_shipped(site, entry)} installs {entry}: {why}"
    return None


def command_shadowing(root: Path, site: Path) -> str | None:
    """Why the environment at `root` could run something else in place of the interpreter or a shell, or None.

    A distribution's RECORD that lists a script named like one of `COMMANDS` (pip writes a
    console script over the venv's own `bin/python`, unlinking its link), or a `bin/python*`
    of the venv that is no longer a link (whatever RECORD says).
    """
    for shipper, rows in _installed_records(site):
        for row in rows:
            script = PurePosixPath(row[0]) if row else PurePosixPath(".")
            if script.parent.name == "bin" and row[0].startswith("../") and COMMANDS.fullmatch(script.name):
                return f"distribution {shipper} installs a script {script.name}, run in place of the system's"
    for entry in sorted((root / "bin").iterdir()) if (root / "bin").is_dir() else []:
        if COMMANDS.fullmatch(entry.name) and entry.name.startswith("python") and not entry.is_symlink():
            return f"its bin/{entry.name} is no longer the interpreter's link"
    return None


def _pth_shadowing(site: Path, root: Path, entry: str, base_lines: list[str]) -> str | None:
    """Why one `.pth` file could put another torch on the path, or None.

    Its lines are read as every interpreter that may process it reads them, and where they
    disagree the file is refused: a line is split at `\\n`, `\\r` or both (Python up to 3.12;
    3.13 also splits at the other Unicode line breaks, which a line may then not hold), a line
    that starts with `import` after whitespace or a byte-order mark runs code (3.13 drops a
    leading mark), and a path line keeps its leading whitespace (only the end is stripped).
    A path line must lead to a folder: an archive on the path imports what it holds.
    """
    path = site / entry
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_PTH_LIMIT + 1)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if len(raw) > _PTH_LIMIT:
        return f"it is larger than {_PTH_LIMIT >> 20} MiB, past what is read of it (an interpreter reads it all)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "it is not UTF-8 text, which an interpreter would read in its locale's encoding"
    if entry == BASE_PTH:
        lines = [line.strip() for line in _LINE_BREAKS.split(text)]
        return None if [line for line in lines if line] == base_lines else "it is not the file twin wrote"
    for line in _LINE_BREAKS.split(text.removeprefix("\ufeff")):
        if not line.strip() or line.startswith("#"):
            continue
        line = line.rstrip()
        if line.lstrip().startswith(("import ", "import\t")):
            return f"its line {line[:60]!r} runs code at every start of the environment's interpreter"
        if not line.isprintable():
            return f"its line {line[:60]!r} holds a character an interpreter may read as a line break or drop"
        target = Path(os.path.realpath(site / line))
        if target != root and root not in target.parents:
            return f"its line {line[:60]!r} puts a folder outside the environment on the path"
        if target.exists() and not target.is_dir():
            return f"its line {line[:60]!r} puts a file on the path, whose archive could hold a {PINNED}"
        torch = holds_torch(target)
        if torch is not None:
            return f"its line {line[:60]!r} puts {torch} on the path"
    return None


def _shipped(site: Path, entry: str) -> str:
    """The distribution whose installed RECORD lists `entry` (as a file or a folder of files), for the refusal."""
    for shipper, rows in _installed_records(site):
        if any(row and row[0].split("/")[0] == entry for row in rows):
            return f"distribution {shipper}"
    return "a distribution whose RECORD does not list it"


def _installed_records(site: Path) -> Iterator[tuple[str, list[list[str]]]]:
    """Each installed distribution's name and the rows of its RECORD (one that cannot be read: skipped)."""
    for info in sorted(site.glob("*.dist-info")):
        try:
            rows = list(csv.reader((info / "RECORD").read_text(errors="replace").splitlines()))
        except OSError:
            continue
        yield info.name.removesuffix(".dist-info").split("-")[0], rows
