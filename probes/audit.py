"""Static migration audit: is this a migration, or a wrapper around the original?

Behaviour checks alone cannot see a migration that never happened (papers 000,
001): a candidate that imports the original, shells out to it, vendors a copy of
it or restates it statement for statement can pass every differential probe.
The audit reads the candidate's files (never runs them) and reports, with file
and line:

- `forbidden_import`: an import of the source framework (torch), also through
  `importlib.import_module("torch")` or `__import__`;
- `loads_original`: a reference to the original's location (its mount point or
  host path) or a module of the original imported by name, a `sys.path` change
  towards it, `runpy`/`exec` of it, or a shell-out (`subprocess`, `os.system`)
  in a file that names the original or the source framework;
- `vendored`: a file that is a copy of one of the original's (same normalized text);
- `transliteration`: a file that restates one of the original's files statement
  for statement once framework names are normalized (see `probes.transliteration`).

Python is parsed with libcst. Shell scripts, C/C++ sources and packaging files
are parsed by `probes.foreign_files` (tree-sitter, tomllib, packaging), so a
framework named only in a comment is no finding; other text files (configs,
Dockerfiles) are scanned line by line for the same references.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import stat
from pathlib import Path

from ground.agent_tree import Walk
from probes.audit_base import HIDDEN_KINDS, MAX_FILE_BYTES, SKIP_DIRS, Finding, python_files, read_source, scan
from probes.foreign_files import file_kind, foreign_findings
from probes.layout import import_roots as roots_of
from probes.layout import own_top_names
from probes.transliteration import find_transliterations

TEXT_SUFFIXES = {
    ".sh",
    ".bash",
    ".cfg",
    ".toml",
    ".yaml",
    ".yml",
    ".ini",
    ".txt",
    ".json",
    ".md",
    "",
}
SHELL_CALLS = {
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.Popen",
    "os.system",
    "os.popen",
    "os.execv",
    "os.execvp",
    "os.spawnv",
}
LOADER_CALLS = {
    "runpy.run_path",
    "runpy.run_module",
    "exec",
    "importlib.util.spec_from_file_location",
}
IMPORT_CALLS = {"importlib.import_module", "__import__"}


def _text_files(root: Path, found: Walk) -> list[Path]:
    out = []
    for e in found.files():
        p = root / e.rel
        if SKIP_DIRS & set(e.rel.split("/")) or p.suffix == ".py":
            continue
        if (p.suffix in TEXT_SUFFIXES or p.name == "Dockerfile") and e.st.st_size < MAX_FILE_BYTES:
            out.append(p)
    return out


def hidden_from_audit(root: Path, found: Walk, markers: list[str]) -> list[Finding]:
    """What the candidate keeps out of the audit's sight, as findings of every kind.

    A tree deeper or larger than the walk's caps, a Python file over the size cap or
    unreadable, or a symlink that leaves the candidate towards the original: code the
    audit cannot read has not passed it.
    """
    every = HIDDEN_KINDS
    findings = [
        Finding("loads_original", e.rel, 0, f"a symbolic link to the original ({os.readlink(root / e.rel)[:80]})")
        for e in found.entries
        if stat.S_ISLNK(e.st.st_mode) and _links_to(root / e.rel, markers)
    ]
    hidden: list[tuple[str, str]] = []
    if found.incomplete:
        hidden.append((".", f"the tree could not be read whole: {found.incomplete}"))
    for e in found.entries:
        if e.rel.endswith(".py") and e.is_file and e.st.st_size > MAX_FILE_BYTES:
            hidden.append((e.rel, f"{e.st.st_size} bytes, over the audit's {MAX_FILE_BYTES}-byte cap"))
        elif e.rel.endswith(".py") and not e.is_file and not e.is_dir and not stat.S_ISLNK(e.st.st_mode):
            hidden.append((e.rel, "a special file where a module is expected"))
    return findings + [Finding(kind, rel, 0, f"hidden from the audit: {why}") for rel, why in hidden for kind in every]


def _links_to(link: Path, markers: list[str]) -> bool:
    """Whether a symlink's target names the original (its mount point or host path)."""
    try:
        target = os.readlink(link)
    except OSError:
        return False
    return any(m.rstrip("/") and target.startswith(m.rstrip("/")) for m in markers)


def _dotted(node) -> str:
    """'a.b.c' for a Name/Attribute chain, else ''."""
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


class _PythonAuditor:
    """Collects findings from one Python module parsed with libcst."""

    def __init__(
        self,
        rel: str,
        forbidden: set[str],
        source_modules: set[str],
        markers: list[str],
        mount: str,
    ) -> None:
        self.mount = mount.rstrip("/")
        self.rel = rel
        self.forbidden = forbidden
        self.source_modules = source_modules
        self.markers = markers
        self.findings: list[Finding] = []
        self.shell_lines: list[tuple[int, str]] = []
        self.mentions_original = False

    def run(self, text: str) -> list[Finding]:
        import libcst as cst
        from libcst.metadata import MetadataWrapper, PositionProvider

        # CPython's parser first: libcst's native parser crashes the process (not an exception)
        # on nesting the candidate can make arbitrarily deep; what CPython cannot parse for
        # depth is hidden from the audit, which is not passing it.
        try:
            ast.parse(text)
        except (RecursionError, MemoryError):
            return [
                Finding(kind, self.rel, 0, "hidden from the audit: nested too deeply to parse") for kind in HIDDEN_KINDS
            ]
        except (SyntaxError, ValueError) as exc:
            return [Finding("unparsable", self.rel, getattr(exc, "lineno", 0) or 0, str(exc).splitlines()[0][:200])]
        try:
            wrapper = MetadataWrapper(cst.parse_module(text))
        except cst.ParserSyntaxError as exc:
            return [Finding("unparsable", self.rel, getattr(exc, "raw_line", 0), str(exc).splitlines()[0])]
        positions = wrapper.resolve(PositionProvider)
        auditor = self

        class Visitor(cst.CSTVisitor):
            def _line(self, node) -> int:
                return positions[node].start.line

            def visit_Import(self, node) -> None:
                for alias in node.names:
                    auditor.check_module(_dotted(alias.name), self._line(node))

            def visit_ImportFrom(self, node) -> None:
                if node.relative or node.module is None:
                    return
                auditor.check_module(_dotted(node.module), self._line(node))

            def visit_Call(self, node) -> None:
                name = _dotted(node.func)
                line = self._line(node)
                first = node.args[0].value if node.args else None
                literal = first.evaluated_value if isinstance(first, cst.SimpleString) else None
                if name in IMPORT_CALLS and isinstance(literal, str):
                    auditor.check_module(literal, line)
                if name in SHELL_CALLS:
                    auditor.shell_lines.append((line, name))
                if name in LOADER_CALLS and auditor.mentions(cst.Module([]).code_for_node(node)):
                    auditor.add("loads_original", line, f"{name} of the original")

            def visit_SimpleString(self, node) -> None:
                value = node.evaluated_value
                if isinstance(value, str) and auditor.mentions(value):
                    auditor.mentions_original = True
                    auditor.add(
                        "loads_original",
                        self._line(node),
                        f"refers to the original: {value[:80]!r}",
                    )
                elif isinstance(value, str) and auditor.names_forbidden(value):
                    auditor.mentions_original = True

        wrapper.visit(Visitor())
        if self.shell_lines and self.mentions_original:
            for line, name in self.shell_lines:
                self.add(
                    "loads_original",
                    line,
                    f"{name} in a file that names the original or the source framework",
                )
        return self.findings

    def add(self, kind: str, line: int, detail: str) -> None:
        self.findings.append(Finding(kind, self.rel, line, detail))

    def check_module(self, module: str, line: int) -> None:
        top = module.split(".")[0]
        if top in self.forbidden:
            self.add("forbidden_import", line, f"imports {module}")
        elif top in self.source_modules:
            self.add("loads_original", line, f"imports {module}, a module only the original provides")

    def mentions(self, text: str) -> bool:
        return text.strip() == self.mount or any(marker in text for marker in self.markers)

    def names_forbidden(self, text: str) -> bool:
        return any(re.search(rf"\b{re.escape(f)}\b", text) for f in self.forbidden)


def _uses_framework(text: str, forbidden: set[str]) -> bool:
    return any(re.search(rf"^\s*(import|from)\s+{re.escape(f)}\b", text, re.M) for f in forbidden)


def _normalized_hash(text: str) -> str:
    lines = [line.strip() for line in text.splitlines()]
    return hashlib.sha1("\n".join(line for line in lines if line and not line.startswith("#")).encode()).hexdigest()


def audit_candidate(
    candidate: Path,
    source: Path,
    *,
    forbidden: list[str],
    source_mount: str = "/source",
    transliteration: bool = True,
    import_roots: list[str] | None = None,
) -> list[Finding]:
    """Every finding of the static audit, sorted by file and line.

    Args:
        candidate: the candidate tree (host path).
        source: the original repository (host path), to compare against.
        forbidden: the source-framework packages (e.g. ['torch']).
        source_mount: where the original appears inside a sandbox.
        transliteration: also compare syntax trees file against file (slower).
        import_roots: the candidate's import roots (`probes.layout.import_roots`);
            None infers them from its layout.
    """
    candidate, source = candidate.resolve(), source.resolve()
    forbidden_set = set(forbidden)
    found = scan(candidate)
    cand_files = python_files(candidate, found)
    roots = roots_of(candidate, import_roots)
    # Whatever the original calls its modules, a name that resolves to a module of the
    # candidate's own (under any of its import roots) is the candidate's.
    cand_top = own_top_names(candidate, roots)
    source_top = {p.relative_to(source).parts[0].removesuffix(".py") for p in python_files(source)}
    source_modules = source_top - cand_top
    markers = [m for m in {source_mount.rstrip("/") + "/", str(source)} if m not in ("/", "")]
    # Only files that use the source framework need migrating; a verbatim copy of a
    # framework-free file (a config, a tokenizer) is a correct migration of it.
    source_hashes = {
        _normalized_hash(text): p.relative_to(source)
        for p in python_files(source)
        if _uses_framework(text := read_source(p), forbidden_set)
    }
    findings: list[Finding] = hidden_from_audit(candidate, found, markers)
    for path in cand_files:
        rel = str(path.relative_to(candidate))
        text = read_source(path)
        # A script's own directory is on its sys.path: a sibling is the candidate's too.
        local = source_modules - {p.stem for p in path.parent.glob("*.py")}
        findings += _PythonAuditor(rel, forbidden_set, local, markers, source_mount).run(text)
        copied = source_hashes.get(_normalized_hash(text))
        if copied is not None and text.strip():
            findings.append(Finding("vendored", rel, 1, f"a copy of the original's {copied}"))
    findings += foreign_findings(candidate, forbidden_set, markers=markers, source_mount=source_mount)
    for path in _text_files(candidate, found):
        parsed = file_kind(path)  # parsed above, comments told apart
        if parsed in ("shell", "requirements"):
            continue
        rel = str(path.relative_to(candidate))
        for number, line in enumerate(read_source(path).splitlines(), start=1):
            if any(m in line for m in markers):
                findings.append(
                    Finding(
                        "loads_original",
                        rel,
                        number,
                        f"refers to the original: {line.strip()[:80]!r}",
                    )
                )
            if parsed is None and re.search(r"\b(pip|uv|conda)\b.*\binstall\b", line) and any(
                re.search(rf"\b{re.escape(f)}\b", line) for f in forbidden_set
            ):
                findings.append(
                    Finding(
                        "forbidden_import",
                        rel,
                        number,
                        f"installs the source framework: {line.strip()[:80]!r}",
                    )
                )
    if transliteration:
        vendored = {f.file for f in findings if f.kind == "vendored"}
        for match in find_transliterations(candidate, source, forbidden=forbidden):
            if match.candidate_file not in vendored:
                findings.append(
                    Finding(
                        "transliteration",
                        match.candidate_file,
                        match.first_line,
                        f"restates the original's {match.source_file} statement for statement "
                        f"({match.coverage:.0%} of its {match.statements} statements and "
                        f"{match.framework_coverage:.0%} of its framework statements in order)",
                    )
                )
    return sorted(findings, key=lambda f: (f.file, f.line, f.kind))
