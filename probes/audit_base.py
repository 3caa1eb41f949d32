"""What every part of the static migration audit shares: the finding it reports and how it reads files.

`probes.audit` runs the audit on top of this module; the readers it delegates to
(`probes.foreign_files`, `probes.foreign_code`, `probes.transliteration`,
`probes.layout`) report `Finding`s and read the candidate through `scan`,
`python_files` and `read_source`, so none of them imports the audit itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ground.agent_tree import Walk, walk
from ground.untrusted_io import AgentFileError, read_regular_text

SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache"}
MAX_FILE_BYTES = 2_000_000
# Every kind of finding a file or tree kept from the audit's sight counts as.
HIDDEN_KINDS = ("forbidden_import", "loads_original", "vendored", "transliteration")


@dataclass(frozen=True)
class Finding:
    """One thing the audit found."""

    kind: str
    file: str
    line: int
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def scan(root: Path) -> Walk:
    """The bounded, link-free walk of `root` the audit reads (caches and environments skipped)."""
    return walk(root, skip_dirs=SKIP_DIRS)


def python_files(root: Path, found: Walk | None = None) -> list[Path]:
    """Regular Python files under `root` (no symlinks, no special files), skipping caches."""
    found = found if found is not None else scan(root)
    return [root / e.rel for e in found.files(".py") if not (SKIP_DIRS & set(e.rel.split("/")))]


def read_source(path: Path) -> str:
    """A file's text for the audit: a regular file only, never through a link, at most MAX_FILE_BYTES.

    A file that is over the cap or cannot be opened reads as empty here; `audit_candidate`
    reports it as hidden from the audit.
    """
    try:
        return read_regular_text(path, MAX_FILE_BYTES)
    except AgentFileError:
        return ""
