"""The code among a candidate's non-Python files, read with tree-sitter (never run).

`CodeAuditor` reads shell scripts (tree-sitter-bash: `python -c`, python heredocs,
`bash -c` strings, installers, words naming the original), C/C++/CUDA sources
(tree-sitter-c, tree-sitter-cpp: `#include` of the framework's headers), and the
Python inside them and in `setup.py` (tree-sitter-python). Comments and strings
that nothing executes are separate nodes of the tree, so they are never findings.
The grammars are imported on first use. `probes.foreign_files` walks the candidate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from probes.audit_base import Finding

# Native names a framework goes by in headers and link lines, beyond its own name.
NATIVE_NAMES = {
    "torch": {"torch", "ATen", "c10", "caffe2", "THC", "TH", "libtorch", "torch_cpu", "torch_cuda", "torch_python"}
}
# Other names the framework is installed under (conda's 'pytorch').
PACKAGE_ALIASES = {"torch": {"pytorch"}}
WRAPPERS = {"sudo", "env", "exec", "time", "nohup", "command", "nice", "xargs"}
INSTALLERS = {"pip", "pip3", "uv", "conda", "mamba", "micromamba", "poetry"}
SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


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


class CodeAuditor:
    """Findings in code that tree-sitter parses: shell, C/C++, the Python inside them and `setup.py`."""

    def __init__(self, forbidden: set[str], markers: list[str], mount: str) -> None:
        self.forbidden = forbidden
        self.packages = {_normal(n) for f in forbidden for n in {f, *PACKAGE_ALIASES.get(f, set())}}
        self.native = set(forbidden).union(*(NATIVE_NAMES.get(f, set()) for f in forbidden))
        self.markers = [m for m in markers if m]
        self.mount = mount.rstrip("/")
        self.parsers: dict[str, object] = {}
        self.findings: list[Finding] = []
        self.rel = ""
        self.offset = 0  # lines before the code being parsed (a `bash -c` string)
        self.depth = 0

    def parse(self, language: str, data: bytes):
        if language not in self.parsers:
            self.parsers[language] = _parser(language)
        return self.parsers[language].parse(data).root_node

    def add(self, kind: str, line: int, detail: str) -> None:
        self.findings.append(Finding(kind, self.rel, line + self.offset, detail))

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

    def python_imports(self, code: str, line: int, how: str, *, rows: bool = True) -> None:
        """Imports of the framework in Python `code` found at `line` (plus its own row where `rows`)."""
        root = self.parse("python", code.encode())
        for node in _nodes(root):
            modules = []
            if node.type == "import_statement":
                modules = [_text(n).split(" ")[0] for n in node.children_by_field_name("name")]
            elif node.type == "import_from_statement" and node.child_by_field_name("module_name"):
                modules = [_text(node.child_by_field_name("module_name"))]
            elif node.type == "call" and _text(node.child_by_field_name("function")) in (
                "__import__",
                "importlib.import_module",
            ):
                args = node.child_by_field_name("arguments")
                first = next((a for a in args.named_children), None) if args else None
                if first is not None and first.type == "string":
                    modules = [_text(first).strip("'\"")]
            for module in modules:
                if module.split(".")[0] in self.forbidden:
                    self.add("forbidden_import", line + rows * node.start_point[0], f"{how} imports {module}")

    def setup_py(self, data: bytes) -> None:
        root = self.parse("python", data)
        # `install_requires=REQUIRES` reads the module-level `REQUIRES = [...]`.
        assigned = {
            _text(node.child_by_field_name("left")): node.child_by_field_name("right")
            for node in _nodes(root)
            if node.type == "assignment" and node.child_by_field_name("right") is not None
        }
        for node in _nodes(root):
            if node.type != "keyword_argument":
                continue
            key = _text(node.child_by_field_name("name"))
            if key not in ("install_requires", "setup_requires", "extras_require", "requires"):
                continue
            value = node.child_by_field_name("value")
            if value.type == "identifier":
                value = assigned.get(_text(value), value)
            for leaf in _nodes(value):
                if leaf.type == "string_content":
                    self.requirement(_text(leaf), _line(leaf), f"setup.py {key} requires")

    # -- shell ----------------------------------------------------------------------

    def shell(self, data: bytes, offset: int = 0) -> None:
        """Findings of a shell script; `offset` lines before it in the file (a `bash -c` string)."""
        root = self.parse("bash", data)
        outer, self.offset = self.offset, offset
        for node in _nodes(root):
            if node.type == "command":
                self.command(node)
            elif node.type == "redirected_statement":
                # `python - <<EOF` or `cat <<EOF | python`: the heredoc is Python.
                readers = [node.child_by_field_name("body")] + [
                    c for r in node.children if r.type == "heredoc_redirect" for c in _nodes(r)
                ]
                if any(self.reads_python(c) for c in readers if c is not None):
                    for doc in (c for c in node.children if c.type == "heredoc_redirect"):
                        for body in (c for c in doc.children if c.type == "heredoc_body"):
                            self.python_imports(_text(body), _line(body), "a heredoc run by python")
            elif node.type == "pipeline":
                # `echo "import torch" | python`: what is echoed into python is Python.
                stages = [c for c in node.named_children if c.type == "command"]
                if any(self.reads_python(c) for c in stages[1:]):
                    for stage in stages[:-1]:
                        words = self.words(stage)
                        i = self.program(words)
                        if i < len(words) and os.path.basename(words[i][0]) in ("echo", "printf"):
                            for text, arg in words[i + 1 :]:
                                self.python_imports(
                                    text.replace("\\n", "\n"), _line(arg), "a pipe into python", rows=False
                                )
            elif node.type in ("word", "string_content", "raw_string", "heredoc_body") and self.names_original(
                _text(node).strip("'")
            ):
                self.add("loads_original", _line(node), f"refers to the original: {_text(node).strip()[:80]!r}")
        self.offset = outer

    @staticmethod
    def words(command) -> list[tuple[str, object]]:
        out = []
        for child in command.children:
            if child.type == "command_name" or child.type in (
                "word",
                "string",
                "raw_string",
                "concatenation",
                "number",
            ):
                text = _text(child)
                if child.type in ("raw_string", "string"):
                    text = text[1:-1]  # an expansion inside stays as written
                out.append((text, child))
        return out

    @staticmethod
    def program(words: list[tuple[str, object]]) -> int:
        """Where the program is among a command's words: wrappers, assignments and their options skipped."""
        i = 0
        while i < len(words) and (words[i][0] in WRAPPERS or "=" in words[i][0] or words[i][0].startswith("-")):
            i += 1
        return i

    def python_argv(self, words: list[tuple[str, object]]) -> list[tuple[str, object]] | None:
        """The arguments after a python interpreter; None if the program is not python."""
        i = self.program(words)
        if i < len(words) and PYTHON.match(os.path.basename(words[i][0])):
            return words[i + 1 :]
        return None

    def reads_python(self, node) -> bool:
        """A command running python on its standard input (`python`, `python -`, `python -u`)."""
        if node.type != "command":
            return False
        argv = self.python_argv(self.words(node))
        return argv is not None and all(w == "-" or (w.startswith("-") and w not in ("-c", "-m")) for w, _ in argv)

    def command(self, node) -> None:
        words = self.words(node)
        i = self.program(words)
        if i >= len(words):
            return
        name, args = os.path.basename(words[i][0]), words[i + 1 :]
        pairs = list(zip(args, args[1:], strict=False))
        if name in SHELLS:
            code = next(((code, arg) for (flag, _), (code, arg) in pairs if flag == "-c"), None)
            if code is not None and self.depth < 3:
                self.depth += 1
                self.shell(code[0].encode(), offset=self.offset + _line(code[1]) - 1)
                self.depth -= 1
        elif PYTHON.match(name):
            for (flag, _), (code, arg) in pairs:
                if flag == "-c":
                    self.python_imports(code, _line(arg), "python -c")
                    break
                if flag == "-m":
                    if code.split(".")[0] in self.forbidden:
                        self.add("forbidden_import", _line(arg), f"python -m {code}")
                    if code == "pip":
                        self.install([w for w, _ in args[1:]], _line(node))
                    break
        elif name in INSTALLERS:
            self.install([w for w, _ in args], _line(node))

    def install(self, words: list[str], line: int) -> None:
        """`pip install X`, `uv pip install X`, `uv add X`, `conda install X`: words after the program."""
        at = next((i for i, w in enumerate(words[:2]) if w in ("install", "add")), None)
        if at is None:
            return
        skip = False
        for word in words[at + 1 :]:
            if skip or word.startswith("-"):
                skip = word in ("-r", "-c", "-e", "--requirement", "--constraint", "-i", "--index-url")
                continue
            self.requirement(word, line, "installs")

    # -- C/C++ ----------------------------------------------------------------------

    def c_source(self, data: bytes, language: str) -> None:
        for node in _nodes(self.parse(language, data)):
            if node.type == "preproc_include":
                path = node.child_by_field_name("path")
                header = _text(path).strip('<>"') if path is not None else ""
                top = header.split("/")[0].removesuffix(".h")
                if top in self.native:
                    self.add("forbidden_import", _line(node), f"includes the source framework's {header}")
