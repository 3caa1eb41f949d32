"""The candidate's non-Python files that pull the source framework or call into the original.

The Python audit (`probes.audit`) reads `.py` files only; a candidate could still
depend on torch through a file it never reads. This module parses those files
(never runs them) and reports `probes.audit.Finding`s:

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
- `CMakeLists.txt` / `*.cmake`: `find_package(Torch)` or linking the framework.

A framework named in a comment or in a string nothing executes is not a finding:
that is what the parsers are for. The tree is walked without following symlinks,
regular files only, under the caps below.
"""

from __future__ import annotations

import configparser
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

from probes.audit import SKIP_DIRS, Finding

MAX_FILE_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_FILES = 50_000
SHEBANG = re.compile(rb"^#!\S*?(?:/|\s)(?:env\s+)?(?:ba|da|k|z)?sh\b")
C_SUFFIXES = {".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp",
              ".hh": "cpp", ".hxx": "cpp", ".cu": "cpp", ".cuh": "cpp"}
# Native names a framework goes by in headers and link lines, beyond its own name.
NATIVE_NAMES = {"torch": {"torch", "ATen", "c10", "caffe2", "THC", "TH", "libtorch", "torch_cpu",
                          "torch_cuda", "torch_python"}}
# Other names the framework is installed under (conda's 'pytorch').
PACKAGE_ALIASES = {"torch": {"pytorch"}}
WRAPPERS = {"sudo", "env", "exec", "time", "nohup", "command", "nice", "xargs"}
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Regular files under `root` as (path, relative path): no symlinks, caches skipped, capped."""
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
            if stat.S_ISDIR(info.st_mode):
                if entry.name not in SKIP_DIRS and depth < MAX_DEPTH:
                    stack.append((Path(entry.path), depth + 1))
            elif stat.S_ISREG(info.st_mode) and info.st_size <= MAX_FILE_BYTES:
                seen += 1
                if seen > MAX_FILES:
                    return
                path = Path(entry.path)
                yield path, path.relative_to(root).as_posix()


def file_kind(path: Path) -> str | None:
    """'shell', 'c', 'cpp', 'setup.py', 'pyproject', 'setup.cfg', 'requirements', 'cmake', or None."""
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
    if re.fullmatch(r"requirements.*\.(txt|in)", name) or (path.parent.name == "requirements" and suffix in (".txt", ".in")):
        return "requirements"
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


def _parser(language: str):
    from tree_sitter import Language, Parser

    if language == "bash":
        import tree_sitter_bash as grammar
    elif language == "c":
        import tree_sitter_c as grammar
    elif language == "cpp":
        import tree_sitter_cpp as grammar
    else:
        import tree_sitter_python as grammar
    return Parser(Language(grammar.language()))


def _nodes(node) -> Iterator:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _line(node) -> int:
    return node.start_point[0] + 1


def _text(node) -> str:
    return node.text.decode(errors="replace")


class _Auditor:
    """Findings of one candidate's non-Python files."""

    def __init__(self, forbidden: set[str], markers: list[str], mount: str) -> None:
        self.forbidden = forbidden
        self.packages = {_normal(n) for f in forbidden for n in {f, *PACKAGE_ALIASES.get(f, set())}}
        self.native = set(forbidden).union(*(NATIVE_NAMES.get(f, set()) for f in forbidden))
        self.markers = [m for m in markers if m]
        self.mount = mount.rstrip("/")
        self.parsers: dict[str, object] = {}
        self.findings: list[Finding] = []
        self.rel = ""

    def parse(self, language: str, data: bytes):
        if language not in self.parsers:
            self.parsers[language] = _parser(language)
        return self.parsers[language].parse(data).root_node

    def add(self, kind: str, line: int, detail: str) -> None:
        self.findings.append(Finding(kind, self.rel, line, detail))

    def names_original(self, word: str) -> bool:
        return word.strip().rstrip("/") == self.mount or any(m in word for m in self.markers)

    def requirement(self, text: str, line: int, where: str) -> None:
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            name = Requirement(text.strip()).name
        except InvalidRequirement:
            return
        if _normal(name) in self.packages:
            self.add("forbidden_import", line, f"{where} the source framework: {text.strip()[:80]!r}")

    # -- Python code (python -c, heredocs, setup.py) -------------------------------

    def python_imports(self, code: str, line: int, how: str) -> None:
        root = self.parse("python", code.encode())
        for node in _nodes(root):
            modules = []
            if node.type == "import_statement":
                modules = [_text(n).split(" ")[0] for n in node.children_by_field_name("name")]
            elif node.type == "import_from_statement" and node.child_by_field_name("module_name"):
                modules = [_text(node.child_by_field_name("module_name"))]
            elif node.type == "call" and _text(node.child_by_field_name("function")) in (
                "__import__", "importlib.import_module"
            ):
                args = node.child_by_field_name("arguments")
                first = next((a for a in args.named_children), None) if args else None
                if first is not None and first.type == "string":
                    modules = [_text(first).strip("'\"")]
            for module in modules:
                if module.split(".")[0] in self.forbidden:
                    self.add("forbidden_import", line + node.start_point[0], f"{how} imports {module}")

    def setup_py(self, data: bytes) -> None:
        root = self.parse("python", data)
        for node in _nodes(root):
            if node.type != "keyword_argument":
                continue
            key = _text(node.child_by_field_name("name"))
            if key not in ("install_requires", "setup_requires", "extras_require", "requires"):
                continue
            for leaf in _nodes(node.child_by_field_name("value")):
                if leaf.type == "string_content":
                    self.requirement(_text(leaf), _line(leaf), f"setup.py {key} requires")

    # -- shell ----------------------------------------------------------------------

    def shell(self, data: bytes) -> None:
        root = self.parse("bash", data)
        for node in _nodes(root):
            if node.type == "command":
                self.command(node)
            elif node.type == "redirected_statement":
                body = node.child_by_field_name("body")
                words = self.words(body) if body is not None and body.type == "command" else []
                if self.python_argv(words) is not None:
                    for doc in (c for c in _nodes(node) if c.type == "heredoc_body"):
                        self.python_imports(_text(doc), _line(doc), "a heredoc run by python")
            elif node.type in ("word", "string_content", "raw_string", "heredoc_body") and self.names_original(
                _text(node).strip("'")
            ):
                self.add("loads_original", _line(node), f"refers to the original: {_text(node).strip()[:80]!r}")

    @staticmethod
    def words(command) -> list[tuple[str, object]]:
        out = []
        for child in command.children:
            if child.type == "command_name" or child.type in ("word", "string", "raw_string", "concatenation", "number"):
                text = _text(child)
                if child.type == "raw_string" or (child.type == "string" and "$" not in text):
                    text = text[1:-1]
                out.append((text, child))
        return out

    @staticmethod
    def python_argv(words: list[tuple[str, object]]) -> list[tuple[str, object]] | None:
        """The arguments after a python interpreter, wrappers skipped; None if not python."""
        i = 0
        while i < len(words) and (words[i][0] in WRAPPERS or "=" in words[i][0] or words[i][0].startswith("-")):
            i += 1
        if i < len(words) and PYTHON.match(os.path.basename(words[i][0])):
            return words[i + 1:]
        return None

    def command(self, node) -> None:
        words = self.words(node)
        argv = self.python_argv(words)
        if argv is not None:
            for (flag, _), (code, arg) in zip(argv, argv[1:], strict=False):
                if flag == "-c":
                    self.python_imports(code, _line(arg), "python -c")
                    break
                if flag == "-m":
                    if code.split(".")[0] in self.forbidden:
                        self.add("forbidden_import", _line(arg), f"python -m {code}")
                    if code == "pip":
                        self.install([w for w, _ in argv], _line(node))
                    break
            return
        self.install([w for w, _ in words], _line(node))

    def install(self, words: list[str], line: int) -> None:
        names = [os.path.basename(w) for w in words]
        at = next((i for i, w in enumerate(names) if w in ("install", "add")), None)
        if at is None or not {"pip", "pip3", "uv", "conda", "mamba", "micromamba", "poetry"} & set(names[:at]):
            return
        skip = False
        for word in words[at + 1:]:
            if skip or word.startswith("-"):
                skip = word in ("-r", "-c", "-e", "--requirement", "--constraint", "-i", "--index-url")
                continue
            self.requirement(word, line, "installs")

    # -- C/C++, build files ---------------------------------------------------------

    def c_source(self, data: bytes, language: str) -> None:
        for node in _nodes(self.parse(language, data)):
            if node.type == "preproc_include":
                path = node.child_by_field_name("path")
                header = _text(path).strip("<>\"") if path is not None else ""
                top = header.split("/")[0].removesuffix(".h")
                if top in self.native:
                    self.add("forbidden_import", _line(node), f"includes the source framework's {header}")

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
            if not line.startswith("-"):
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
        for extra in project.get("optional-dependencies", {}).values():
            reqs += list(extra)
        poetry = data.get("tool", {}).get("poetry", {})
        reqs += [name for name in poetry.get("dependencies", {}) if name != "python"]
        self.declared(text, [r for r in reqs if isinstance(r, str)], "pyproject.toml requires")

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
    for path, rel in walk(Path(candidate)):
        kind = file_kind(path)
        if kind is None:
            continue
        auditor.rel = rel
        data = path.read_bytes()
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
            elif kind == "requirements":
                auditor.requirements_file(text)
            else:
                auditor.cmake(text)
        except (tomllib.TOMLDecodeError, configparser.Error) as exc:
            auditor.add("unparsable", 1, str(exc).splitlines()[0][:200])
    return sorted(auditor.findings, key=lambda f: (f.file, f.line, f.kind))
