"""The candidate's non-Python files that pull the source framework or call into the original.

The Python audit (`probes.audit`) reads `.py` files only; a candidate could still
depend on torch through a file it never reads. This module parses those files
(never runs them) and reports `probes.audit_base.Finding`s; the code among them is read
with tree-sitter by `probes.foreign_code`:

- shell scripts (`*.sh`, `*.bash`, or a shell shebang), parsed with tree-sitter-bash:
  `python -c "import torch"` and `python - <<EOF` bodies (parsed with
  tree-sitter-python), `pip`/`uv pip`/`conda` installs of the framework, and any
  executed word naming the original's location;
- C/C++/CUDA sources, parsed with tree-sitter-c / tree-sitter-cpp: `#include` of
  the framework's headers (`<torch/extension.h>`, `<ATen/...>`, `<c10/...>`);
- `setup.py` (tree-sitter-python): `install_requires`, `setup_requires`,
  `extras_require` naming the framework (its `torch.utils.cpp_extension` import
  is already the Python audit's);
- `pyproject.toml` (tomllib), `setup.cfg` (configparser), `requirements*.txt`
  (`packaging.requirements`): the framework as a dependency;
- `environment.yml` (a conda environment, pyyaml): the framework among its
  dependencies or their `pip:` list;
- `CMakeLists.txt` / `*.cmake`: `find_package(Torch)` or linking the framework.

A framework named in a comment or in a string nothing executes is not a finding:
that is what the parsers are for. The tree is walked without following symlinks,
regular files only, under the caps below.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

from probes.audit_base import SKIP_DIRS, Finding
from probes.foreign_code import CodeAuditor

MAX_FILE_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_FILES = 50_000
SHEBANG = re.compile(rb"^#!\S*?(?:/|\s)(?:env\s+)?(?:ba|da|k|z)?sh\b")
C_SUFFIXES = {
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".cu": "cpp",
    ".cuh": "cpp",
}


def walk(root: Path, links: list[tuple[str, str]] | None = None) -> Iterator[tuple[Path, str]]:
    """Regular files under `root` as (path, relative path): no symlinks, caches skipped, capped.

    Args:
        links: if given, each symlink met is appended as (relative path, its target), unfollowed.
    """
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) and links is not None:
                with contextlib.suppress(OSError):
                    links.append((Path(entry.path).relative_to(root).as_posix(), os.readlink(entry.path)))
            elif stat.S_ISDIR(info.st_mode):
                if entry.name not in SKIP_DIRS and depth < MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
            elif stat.S_ISREG(info.st_mode) and info.st_size <= MAX_FILE_BYTES:
                seen += 1
                if seen > MAX_FILES:
                    return
                path = Path(entry.path)
                yield path, path.relative_to(root).as_posix()


def _read(path: Path) -> bytes:
    """At most MAX_FILE_BYTES of a file, never through a symlink swapped in since the walk."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_FILE_BYTES)


def file_kind(path: Path) -> str | None:
    """'shell', 'c', 'cpp', 'setup.py', 'pyproject', 'setup.cfg', 'requirements', 'conda', 'cmake', or None."""
    name, suffix = path.name, path.suffix.lower()
    if suffix in (".sh", ".bash"):
        return "shell"
    if suffix in C_SUFFIXES:
        return C_SUFFIXES[suffix]
    if name == "setup.py":
        return "setup.py"
    if name == "pyproject.toml":
        return "pyproject"
    if name == "setup.cfg":
        return "setup.cfg"
    if re.fullmatch(r"requirements.*\.(txt|in)", name) or (
        path.parent.name == "requirements" and suffix in (".txt", ".in")
    ):
        return "requirements"
    if name in ("environment.yml", "environment.yaml"):
        return "conda"
    if name == "CMakeLists.txt" or suffix == ".cmake":
        return "cmake"
    if suffix == "":
        try:
            with path.open("rb") as f:
                head = f.readline(200)
        except OSError:
            return None
        return "shell" if SHEBANG.match(head) else None
    return None


class _Auditor(CodeAuditor):
    """Findings of one candidate's non-Python files: its code (`CodeAuditor`) and its declarations."""

    def cmake(self, text: str) -> None:
        for number, raw in enumerate(text.splitlines(), start=1):
            line = re.sub(r"#.*", "", raw)
            names = "|".join(re.escape(n) for n in sorted(self.native))
            if re.search(rf"find_package\s*\(\s*({names})\b", line, re.I) or (
                re.search(r"target_link_libraries|link_libraries", line)
                and re.search(rf"(\b|\$\{{)({names})(_LIBRARIES)?\b", line, re.I)
            ):
                self.add("forbidden_import", number, f"links the source framework: {raw.strip()[:80]!r}")

    def requirements_file(self, text: str) -> None:
        for number, raw in enumerate(text.splitlines(), start=1):
            line = re.sub(r"(^|\s)#.*", "", raw).strip()
            if not line:
                continue
            if any(self.names_original(word) for word in line.split()):
                self.add("loads_original", number, f"refers to the original: {line[:80]!r}")
            egg = re.search(r"#egg=([\w.-]+)", line)
            if egg:  # -e git+https://...#egg=torch
                self.requirement(egg.group(1), number, "requires")
            elif not line.startswith("-"):
                self.requirement(line, number, "requires")

    def declared(self, text: str, requirements: list[str], where: str) -> None:
        lines = text.splitlines()
        for req in requirements:
            number = next((i for i, line in enumerate(lines, 1) if req.strip() in line.split("#")[0]), 1)
            self.requirement(req, number, where)

    def pyproject(self, text: str) -> None:
        data = tomllib.loads(text)
        project = data.get("project", {})
        reqs = list(project.get("dependencies", [])) + list(data.get("build-system", {}).get("requires", []))
        groups = list(project.get("optional-dependencies", {}).values())
        groups += list(data.get("dependency-groups", {}).values())
        for group in groups:
            reqs += list(group)
        poetry = data.get("tool", {}).get("poetry", {})
        reqs += [name for name in poetry.get("dependencies", {}) if name != "python"]
        self.declared(text, [r for r in reqs if isinstance(r, str)], "pyproject.toml requires")

    def conda_environment(self, text: str) -> None:
        """`environment.yml`: conda specs ('pytorch=2.1') and its `pip:` list."""
        import yaml

        data = yaml.safe_load(text)
        deps = (data.get("dependencies") or []) if isinstance(data, dict) else []
        deps = deps if isinstance(deps, list) else []
        reqs = []
        for dep in deps:
            if isinstance(dep, str):
                reqs.append(re.split(r"[=<>!~ ]", dep.split("::")[-1], maxsplit=1)[0])
            elif isinstance(dep, dict):
                reqs += [r for r in dep.get("pip") or [] if isinstance(r, str)]
        self.declared(text, reqs, "the conda environment requires")

    def setup_cfg(self, text: str) -> None:
        config = configparser.ConfigParser(interpolation=None)
        config.read_string(text)
        reqs = []
        for section, keys in (("options", ("install_requires", "setup_requires")), ("options.extras_require", None)):
            if config.has_section(section):
                for key, value in config.items(section):
                    if keys is None or key in keys:
                        reqs += [line for line in value.splitlines() if line.strip()]
        self.declared(text, reqs, "setup.cfg requires")


def foreign_findings(
    candidate: Path, forbidden: set[str] | list[str], *, markers: list[str] = (), source_mount: str = "/source"
) -> list[Finding]:
    """Findings in the candidate's non-Python files (see the module docstring), sorted by file and line.

    Args:
        candidate: the candidate tree.
        forbidden: the source-framework packages (e.g. {'torch'}).
        markers: strings that name the original's location (its mount point with '/', its host path).
        source_mount: where the original appears inside a sandbox.
    """
    auditor = _Auditor(set(forbidden), list(markers), source_mount)
    import yaml

    links: list[tuple[str, str]] = []
    for path, rel in walk(Path(candidate), links):
        kind = file_kind(path)
        if kind is None:
            continue
        auditor.rel = rel
        try:
            data = _read(path)
        except OSError:
            continue  # gone or swapped for a symlink since the walk
        text = data.decode(errors="replace")
        try:
            if kind == "shell":
                auditor.shell(data)
            elif kind in ("c", "cpp"):
                auditor.c_source(data, kind)
            elif kind == "setup.py":
                auditor.setup_py(data)
            elif kind == "pyproject":
                auditor.pyproject(text)
            elif kind == "setup.cfg":
                auditor.setup_cfg(text)
            elif kind == "conda":
                auditor.conda_environment(text)
            elif kind == "requirements":
                auditor.requirements_file(text)
            else:
                auditor.cmake(text)
        except (tomllib.TOMLDecodeError, configparser.Error, yaml.YAMLError, AttributeError, TypeError) as exc:
            # Neither pip nor conda installs from a file that does not parse or has the wrong shape.
            auditor.add("unparsable", 1, str(exc).splitlines()[0][:200])
    for rel, target in links:
        if auditor.names_original(target):
            auditor.rel = rel
            auditor.add("loads_original", 1, f"a symlink to the original: {target[:80]!r}")
    return sorted(set(auditor.findings), key=lambda f: (f.file, f.line, f.kind, f.detail))
