"""Host-side access to trees an agent controls: bounded, iterative, never following links.

The candidate, probe work directories and grader scratch are written by code the
harness does not trust. Whatever twin itself reads, walks, copies or removes there
goes through this module:

- `read_regular` (from `ground.untrusted_io`, the single-file layer) opens a
  regular file only (`O_NOFOLLOW`, non-blocking, so a FIFO cannot hang it) and reads
  at most a fixed number of bytes, so a sparse or endless file costs no more memory
  than the cap;
- `walk` is iterative, does not follow symlinks and stops at caps on depth and
  entries, saying so (`Walk.capped`): a caller checking a property must treat a
  capped walk as a violation (code hidden from a check has not passed it);
- `copy_tree` copies regular files and directories (and symlinks that stay inside the
  tree, by `link_refusal`'s rule) within caps on total size, file count and depth, drops
  setuid/setgid bits and refuses special files, sparse files and excluded names, listing
  every refusal;
- `remove_tree` removes a tree iteratively (no recursion limit on a deep chain);
  `discard_tree` does the same as a best effort that never raises.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ground.untrusted_io import READ_FLAGS, AgentFileError, kind_of

MAX_DEPTH = 64
MAX_ENTRIES = 50_000
MAX_TOTAL_BYTES = 1 << 30
MAX_FILE_BYTES = 256 << 20
_SPARSE_MIN_BYTES = 1 << 20


@dataclass
class Entry:
    """One entry found by `walk`: its path relative to the root and its lstat."""

    rel: str
    st: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)


@dataclass
class Walk:
    """What `walk` found, and whether it saw everything."""

    entries: list[Entry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    capped: str | None = None
    """Why the walk stopped before the end (depth or entry cap), None when it saw everything."""

    @property
    def incomplete(self) -> str | None:
        """Why some of the tree was not seen (a cap, or entries that could not be read), or None."""
        if self.capped:
            return self.capped
        if self.errors:
            return f"{len(self.errors)} entries could not be read ({self.errors[0]})"
        return None

    def files(self, suffix: str = "") -> list[Entry]:
        return [e for e in self.entries if e.is_file and e.rel.endswith(suffix)]


def walk(
    root: Path,
    *,
    max_depth: int = MAX_DEPTH,
    max_entries: int = MAX_ENTRIES,
    skip_dirs: Iterable[str] = (),
) -> Walk:
    """Every entry under `root`, breadth first, without following symlinks.

    Args:
        skip_dirs: directory names not entered (e.g. `__pycache__`); not a cap.
    """
    skip = frozenset(skip_dirs)
    found = Walk()
    queue: list[tuple[str, int]] = [("", 0)]
    while queue:
        rel_dir, depth = queue.pop(0)
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                names = sorted((e.name, e) for e in it)
        except OSError as exc:
            found.errors.append(f"{rel_dir or '.'}: {exc.strerror or exc}")
            continue
        for name, dirent in names:
            rel = posixpath.join(rel_dir, name) if rel_dir else name
            try:
                st = dirent.stat(follow_symlinks=False)
            except OSError as exc:
                found.errors.append(f"{rel}: {exc.strerror or exc}")
                continue
            if len(found.entries) >= max_entries:
                found.capped = f"more than {max_entries} entries"
                return found
            entry = Entry(rel, st)
            found.entries.append(entry)
            if entry.is_dir and name not in skip:
                if depth + 1 >= max_depth:
                    found.capped = f"deeper than {max_depth} levels ({rel})"
                    continue
                queue.append((rel, depth + 1))
    return found


def link_refusal(rel: str, target: str, kinds: Mapping[str, int]) -> str | None:
    """Why a symlink at `rel` pointing at `target` may not be kept in a copy of its tree, or None.

    The rule, simple enough to check without following anything: the target is relative
    and, read one component at a time from the link's own directory, never climbs above
    the tree and passes through no other symlink of the tree (only its last component may
    be one, itself kept by this rule). Each component before the last is then a real
    directory (or absent), where `..` means what it says, so the link resolves inside the
    tree however the kernel follows it: `m -> sub/l/..` with `sub/l -> ..` is refused.

    Args:
        rel: the link's path relative to the tree's root.
        target: the link's text.
        kinds: `st_mode` of the tree's entries by relative path (an absent path is no link).
    """
    if not target or target.startswith("/"):
        return f"symbolic link out of the tree ({target})"
    where = [part for part in posixpath.dirname(rel).split("/") if part]
    parts = [part for part in target.split("/") if part not in ("", ".")]
    for i, part in enumerate(parts):
        if part == "..":
            if not where:
                return f"symbolic link out of the tree ({target})"
            where.pop()
            continue
        where.append(part)
        if i < len(parts) - 1 and stat.S_ISLNK(kinds.get("/".join(where), 0)):
            return f"symbolic link through another link of the tree ({target})"
    return None


@dataclass
class CopyReport:
    """What `copy_tree` copied and what it refused (relative path: reason)."""

    files: int = 0
    bytes: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    capped: str | None = None

    def summary(self, limit: int = 5) -> str:
        shown = [f"{rel} ({why})" for rel, why in list(self.refused.items())[:limit]]
        more = len(self.refused) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def copy_tree(
    src: Path,
    dst: Path,
    *,
    exclude_names: Iterable[str] = (),
    refuse_name: Callable[[str], str | None] | None = None,
    max_depth: int = MAX_DEPTH,
    max_files: int = MAX_ENTRIES,
    max_bytes: int = MAX_TOTAL_BYTES,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> CopyReport:
    """Copy an agent-controlled tree into a new directory `dst`, within caps; see the module docstring.

    `refuse_name(name)` may give a reason to leave an entry (and, for a directory,
    everything under it) out by its name. Symlinks are copied as symlinks when `link_refusal` keeps them (nothing is
    followed); others are refused. Modes keep their permission
    bits only (no setuid, setgid or sticky). Sizes count apparent bytes, so a sparse
    file cannot expand past `max_bytes`; a sparse file over 1 MiB is refused.
    """
    excluded = frozenset(exclude_names)
    report = CopyReport()
    found = walk(src, max_depth=max_depth, max_entries=max_files * 4)
    report.capped = found.capped
    for message in found.errors:
        report.refused[message.split(":", 1)[0]] = message.split(":", 1)[-1].strip()
    dst.mkdir(parents=True)
    dropped: list[str] = []
    kinds = {entry.rel: entry.st.st_mode for entry in found.entries}
    for entry in found.entries:
        rel, mode = entry.rel, entry.st.st_mode
        if any(rel == d or rel.startswith(d + "/") for d in dropped):
            continue
        name = posixpath.basename(rel)
        why_name = "excluded name" if name in excluded else refuse_name(name) if refuse_name else None
        if why_name:
            report.refused[rel] = why_name
            dropped.append(rel)
            continue
        target = dst / rel
        if stat.S_ISDIR(mode):
            target.mkdir(mode=0o755)
            continue
        if stat.S_ISLNK(mode):
            link = os.readlink(src / rel)
            refused = link_refusal(rel, link, kinds)
            if refused:
                report.refused[rel] = refused
                continue
            os.symlink(link, target)
            continue
        why = _refuse_file(entry.st, report, max_files, max_bytes, max_file_bytes)
        if why:
            report.refused[rel] = why
            continue
        try:
            _copy_file(src / rel, target, entry.st)
        except (OSError, AgentFileError) as exc:
            report.refused[rel] = str(exc).split(": ", 1)[-1]
            continue
        report.files += 1
        report.bytes += entry.st.st_size
    return report


def _refuse_file(st: os.stat_result, report: CopyReport, max_files: int, max_bytes: int, max_file_bytes: int) -> str:
    if not stat.S_ISREG(st.st_mode):
        return f"{kind_of(st.st_mode)} not copied"
    if st.st_size > max_file_bytes:
        return f"{st.st_size} bytes, over the {max_file_bytes}-byte cap per file"
    if st.st_size > _SPARSE_MIN_BYTES and st.st_blocks * 512 < st.st_size // 2:
        return "sparse file not copied"
    if report.files >= max_files:
        report.capped = report.capped or f"more than {max_files} files"
        return "file-count cap reached"
    if report.bytes + st.st_size > max_bytes:
        report.capped = report.capped or f"more than {max_bytes} bytes"
        return "total-size cap reached"
    return ""


def _copy_file(src: Path, dst: Path, st: os.stat_result) -> None:
    fd = os.open(src, READ_FLAGS)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
            raise AgentFileError(f"{src}: changed while being copied")
        os.set_blocking(fd, True)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, st.st_mode & 0o777)
        try:
            left = st.st_size
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                os.write(out, chunk)
                left -= len(chunk)
            os.fchmod(out, st.st_mode & 0o777)  # by the descriptor: never a path swapped meanwhile
        finally:
            os.close(out)
    finally:
        os.close(fd)


def remove_tree(root: Path, *, keep_root: bool = False) -> None:
    """Remove a tree without recursion and without following symlinks.

    Each directory's subdirectories are first moved up to the root, so the tree is
    flattened as it goes: any depth, any path length, a bounded number of open files.
    """
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(root)
        return
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    counter = 0
    try:
        while True:
            with os.scandir(root_fd) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            if not entries:
                break
            for name, is_dir in entries:
                if not is_dir:
                    os.unlink(name, dir_fd=root_fd)
                    continue
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
                try:
                    os.fchmod(sub, 0o700)
                    with os.scandir(sub) as it:
                        children = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
                    for child, child_is_dir in children:
                        if not child_is_dir:
                            os.unlink(child, dir_fd=sub)
                            continue
                        while True:
                            counter += 1
                            try:
                                os.rename(child, f".twin-rm-{counter}", src_dir_fd=sub, dst_dir_fd=root_fd)
                                break
                            except OSError as exc:
                                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                                    raise
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    if not keep_root:
        os.rmdir(root)


def discard_tree(root: Path | str) -> None:
    """Best-effort `remove_tree`: what cannot be removed stays, and nothing is raised.

    The clean-up for trees an agent or a candidate may have written into. It replaces
    `shutil.rmtree(..., ignore_errors=True)`, which recurses once per level and raises
    RecursionError (not an OSError it would ignore) on a deep directory chain.
    """
    try:
        remove_tree(Path(root))
    except OSError:
        pass
