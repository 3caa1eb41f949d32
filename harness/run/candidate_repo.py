"""The candidate repository: a git history kept outside the files the Migrator can write.

The work tree is `runs/<id>/candidate/`, a plain directory (no `.git` entry points
anywhere on the host); its git directory is `runs/<id>/candidate.git`, which no
sandbox mounts, so no role can rewrite the round history.

git never runs on the tree the Migrator wrote. A commit copies that tree first
(`ground.agent_tree.copy_tree`: no nested `.git`, `.gitmodules` or `.gitattributes`,
no symlinks followed or pointing out, no special files, bounded in size, count and
depth) and commits the copy; git itself runs with system, global and per-user
configuration, hooks, fsmonitor, attributes and submodule recursion switched off,
and adds every file of the copy (`--force`: a `.gitignore` the agent wrote leaves
nothing out of the committed and graded snapshot). What the copy refused is one line
in the audit log. So nothing an agent wrote is configuration, a hook, a filter, an
ignore list or a repository to git.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from ground.agent_tree import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_TOTAL_BYTES,
    copy_tree,
    link_refusal,
    remove_tree,
    walk,
)
from ground.errors import TwinError

# Names never committed, at any depth: another repository's state, or instructions to git.
GIT_EXCLUDED = frozenset({".git", ".gitmodules", ".gitattributes", "__pycache__"})
# Characters HFS+ ignores in a name, so `.g\u200cit` is `.git` there (git's is_hfs_dotgit).
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
# `.git` or its 8.3 short name `git~1`, then only dots and spaces, or an NTFS stream or a backslash (is_ntfs_dotgit).
_NTFS_DOTGIT = re.compile(r"(?:\.git|git~1)[. ]*(?:[:\\].*)?", re.IGNORECASE | re.DOTALL)
MAX_DIFF_CHARS = 40_000
_SAFE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.symlinks=true",
    "submodule.recurse=false",
    "diff.external=",
    "diff.submodule=short",
    "status.submoduleSummary=false",
    "protocol.allow=never",
    "gc.auto=0",
)


def git_refused(name: str) -> str | None:
    """Why git would refuse a path component named `name` (a form of `.git`), or None.

    git refuses `.git` in any case, and with its NTFS and HFS protections the forms
    those filesystems read as `.git` (`.git.`, `.git `, `git~1`, `.git::$INDEX_ALLOCATION`,
    `.g\u200cit`). One such name in the work tree made `git add --all` fail the whole
    commit; it is left out of the snapshot and audited instead, whatever git's settings.
    """
    folded = _HFS_IGNORED.sub("", name)
    if folded.lower() == ".git" or _NTFS_DOTGIT.fullmatch(name) or _NTFS_DOTGIT.fullmatch(folded):
        return "a name git refuses (a form of .git)"
    return None


_INVALID_PATH = re.compile(r"invalid path '([^'\n]+)'")


class CandidateRepoError(TwinError):
    """A git operation on the candidate failed."""


class CandidateRepo:
    """Commits and tags one snapshot per round; exports snapshots for grading."""

    def __init__(self, work_tree: Path, git_dir: Path, *, audit_log: Path | None = None) -> None:
        self.work_tree = Path(work_tree)
        self.git_dir = Path(git_dir)
        self.audit_log = audit_log
        self.stage = self.git_dir.with_name(self.git_dir.name + ".stage")
        self.check_written: Callable[[], None] | None = None
        """Raises when the work tree's filesystem lost writes (a capped root): a round is never committed then."""

    def _git(self, *args: str, check: bool = True, work_tree: Path | None = None, index: Path | None = None) -> str:
        config = [part for item in _SAFE_CONFIG for part in ("-c", item)]
        env = _git_env(self.git_dir) | ({"GIT_INDEX_FILE": str(index)} if index is not None else {})
        proc = subprocess.run(
            ["git", *config, f"--git-dir={self.git_dir}", f"--work-tree={work_tree or self.stage}", *args],
            capture_output=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace").strip()[:300]
            raise CandidateRepoError(f"git {args[0]} failed: {stderr}")
        return proc.stdout.decode("utf-8", "replace").strip()

    def init(self) -> None:
        """Create the repository with an empty root commit (idempotent)."""
        self.work_tree.mkdir(parents=True, exist_ok=True)
        self._drop_pointer()
        if (self.git_dir / "HEAD").exists():
            return
        subprocess.run(
            ["git", "init", "-q", "--bare", "--template=", str(self.git_dir)],
            check=True,
            env=_git_env(self.git_dir),
            capture_output=True,
        )
        self._git("config", "core.bare", "false")
        self._git("config", "core.autocrlf", "false")
        self.stage.mkdir(exist_ok=True)
        try:
            self._git("commit", "-q", "--allow-empty", "-m", "round 0: empty candidate")
            self._git("tag", "-f", "round-0")
        finally:
            remove_tree(self.stage)

    def _drop_pointer(self) -> None:
        """Remove the `.git` pointer file older runs left in the work tree (it named a host path)."""
        pointer = self.work_tree / ".git"
        if pointer.is_file() and not pointer.is_symlink():
            if pointer.read_text(errors="replace").startswith(f"gitdir: {self.git_dir}"):
                pointer.unlink()

    def commit_round(self, round: int, message: str) -> str:
        """Commit a checked copy of the work tree as round `round`, tag it `round-N`, return the sha.

        A tree identical to the last commit's makes no commit: the tag goes on that commit.
        Files a full host disk zeroed are never committed: `check_written` raises first."""
        if self.check_written is not None:
            self.check_written()
        remove_tree(self.stage)
        try:
            report = copy_tree(self.work_tree, self.stage, exclude_names=GIT_EXCLUDED, refuse_name=git_refused)
            refused = {k: v for k, v in report.refused.items() if not k.endswith("__pycache__")}
            if refused or report.capped:
                self._audit(
                    round,
                    f"{len(refused)} entries not committed: {_summary(refused)}"
                    + (f"; cap: {report.capped}" if report.capped else ""),
                )
            self._add_all(round)
            # a round that changed nothing is no new candidate: its tag names the commit before it
            if self._git("diff", "--cached", "--name-only", "HEAD"):
                self._git("commit", "-q", "--no-verify", "-m", f"round {round}: {message}")
            self._git("tag", "-f", f"round-{round}")
        finally:
            remove_tree(self.stage)
        return self.head()

    def _add_all(self, round: int, tries: int = 20, *, index: Path | None = None, target: str = "") -> None:
        """`git add` every file of the copy, whatever a .gitignore says (into `index`, else the repository's).

        A path git still calls invalid is left out and audited (under `target`, else round `round`):
        `git_refused` knows the forms of `.git`, and git's own word is the backstop for any other it
        refuses (`.GITMODULES` as a link, say).
        """
        for _ in range(tries):
            try:
                self._git("add", "--all", "--force", ".", index=index)
                return
            except CandidateRepoError as exc:
                invalid = [os.path.normpath(p) for p in _INVALID_PATH.findall(str(exc))]
                invalid = [p for p in invalid if not p.startswith(("/", ".."))]
                if not invalid:
                    raise
                for path in invalid:
                    remove_tree(self.stage / path)
                refused = dict.fromkeys(invalid, "git refuses the path")
                reason = f"{len(refused)} entries not committed: {_summary(refused)}"
                self._audit_target(target or f"round-{round}", reason)
        self._git("add", "--all", "--force", ".", index=index)

    def head(self) -> str:
        return self._git("rev-parse", "HEAD")

    def rounds(self) -> list[int]:
        """Round numbers that have a tag, ascending."""
        tags = self._git("tag", "--list", "round-*").split()
        return sorted(int(t.removeprefix("round-")) for t in tags)

    def changed(self, a: int, b: int) -> bool:
        """Whether the trees of rounds a and b differ."""
        return bool(self._git("diff", "--no-ext-diff", "--name-only", f"round-{a}", f"round-{b}"))

    def diff(self, a: int, b: int, *, limit: int = MAX_DIFF_CHARS) -> str:
        """The changes from round a to round b: a stat, then the patch (cut at `limit` characters)."""
        refs = (f"round-{a}", f"round-{b}")
        stat = self._git("diff", "--no-ext-diff", "--no-textconv", "--stat=120", *refs)
        patch = self._git("diff", "--no-ext-diff", "--no-textconv", *refs)
        text = (stat + "\n\n" + patch).strip() or "(no changes)"
        if len(text) > limit:
            text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
        return text

    def diff_stat(self, a: int, b: int) -> list[str]:
        """The files that differ between rounds a and b, as `path (+added -deleted)`."""
        lines = []
        for row in self._git("diff", "--numstat", f"round-{a}", f"round-{b}").splitlines():
            added, deleted, path = row.split("\t", 2)
            lines.append(f"{path} (binary)" if added == "-" else f"{path} (+{added} -{deleted})")
        return lines

    def reset_to(self, round: int) -> None:
        """Put the work tree back to round `round` exactly (discarding a half-done step)."""
        remove_tree(self.work_tree, keep_root=True)
        self.export(round, self.work_tree)

    def files(self) -> list[str]:
        """Files of the work tree, for prompts (bounded walk; never git on the agent's tree)."""
        found = walk(self.work_tree, skip_dirs=GIT_EXCLUDED)
        names = [e.rel for e in found.entries if not e.is_dir and not e.rel.endswith(".pyc")]
        names = [n for n in names if not any(part in GIT_EXCLUDED for part in n.split("/"))]
        if found.capped:
            names.append(f"(listing stopped: {found.capped})")
        return names

    def export(self, round: int, dest: Path) -> Path:
        """Write the snapshot of round `round` to `dest` (no git metadata), within size caps.

        Directories and files are extracted first and symlinks last, each kept only by
        the rule copies keep (`link_refusal`: judged against the whole tree, so no link
        extracted early can lead a later one out). A member the extraction refuses (a link
        out, over a cap) is skipped and audited.
        """
        if not self._git("tag", "--list", f"round-{round}"):
            raise CandidateRepoError(f"git archive failed: round {round} has no snapshot (rounds: {self.rounds()})")
        return self.export_ref(f"round-{round}", dest, label=f"round-{round}")

    def export_ref(self, ref: str, dest: Path, *, label: str | None = None) -> Path:
        """Write the tree of `ref` (a round's tag or a snapshot's ref) to `dest`, as `export` does."""
        label = label or ref
        dest.mkdir(parents=True, exist_ok=True)
        if not self._git("ls-tree", "--name-only", ref):
            return dest  # an empty tree: git's archive of it is not a tar stream tarfile reads
        proc = subprocess.Popen(
            [
                "git",
                *[p for i in _SAFE_CONFIG for p in ("-c", i)],
                f"--git-dir={self.git_dir}",
                "archive",
                "--format=tar",
                ref,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_git_env(self.git_dir),
            stdin=subprocess.DEVNULL,
        )
        refused: dict[str, str] = {}
        total = files = 0
        kinds: dict[str, int] = {}
        links: list[tarfile.TarInfo] = []
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                for member in tar:
                    if member.name.count("/") >= MAX_DEPTH:
                        refused[member.name] = "too deep"
                        continue
                    name = member.name.rstrip("/")
                    kinds[name] = stat.S_IFLNK if member.issym() else stat.S_IFDIR if member.isdir() else stat.S_IFREG
                    if member.issym():
                        links.append(member)  # made once the tree stands, by the rule copies keep
                        continue
                    if member.isfile():
                        total, files = total + member.size, files + 1
                        if total > MAX_TOTAL_BYTES or files > MAX_ENTRIES:
                            refused[member.name] = "export size or count cap reached"
                            continue
                    try:
                        _extract(tar, member, dest)
                    except _REFUSED as exc:
                        refused[member.name] = str(exc)[:200]
            while proc.stdout.read(1 << 16):  # whatever git writes past the end marker
                pass
        except tarfile.TarError as exc:
            raise CandidateRepoError(f"git archive of {label} is unreadable: {exc}") from None
        finally:
            # git dies of SIGPIPE when reading stops early: that is never the error to report
            proc.stdout.close()
            proc.wait()
        if proc.returncode != 0:
            raise CandidateRepoError(f"git archive of {label} failed (exit {proc.returncode})")
        for member in links:
            name = member.name.rstrip("/")
            why = link_refusal(name, member.linkname, kinds)
            if why is None:
                try:
                    os.symlink(member.linkname, dest / name)
                except OSError as exc:
                    why = exc.strerror or str(exc)
            if why is not None:
                refused[member.name] = why
        if refused:
            self._audit_target(label, f"{len(refused)} entries not exported: {_summary(refused)}")
        return dest

    def _audit(self, round: int, reason: str) -> None:
        self._audit_target(f"round-{round}", reason)

    def _audit_target(self, target: str, reason: str) -> None:
        if self.audit_log is None:
            return
        line = {
            "time": time.time(),
            "boundary": "snapshot",
            "action": "copy",
            "target": target,
            "reason": reason,
        }
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.audit_log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")


# Extraction filters came with Python 3.11.4; Debian bookworm's 3.11.2 has none: the same rules by hand.
_FILTERS = hasattr(tarfile, "data_filter")
_REFUSED = (getattr(tarfile, "FilterError", tarfile.ExtractError), tarfile.ExtractError, OSError)


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    """Extract one file or directory of a trusted-format, untrusted-content archive under `dest`.

    As tarfile's `data` filter: nothing outside `dest`, no special files, no owner taken from
    the archive, no setuid/setgid/sticky bits and no group or other write bits.

    Raises:
        tarfile.ExtractError (FilterError with filters): the member is refused.
        OSError: it could not be written.
    """
    if _FILTERS:
        tar.extract(member, dest, filter="data")
        return
    base = os.path.abspath(dest)
    target = os.path.abspath(os.path.join(base, member.name))
    if os.path.isabs(member.name) or os.path.commonpath([base, target]) != base:
        raise tarfile.ExtractError(f"{member.name!r} would be extracted outside the destination")
    if not (member.isreg() or member.isdir()):
        raise tarfile.ExtractError(f"{member.name!r} is a special file")
    tar.extract(member, base, set_attrs=False)
    mode = member.mode & 0o755
    if member.isreg():
        mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    os.chmod(target, mode if member.isreg() else 0o755)


def _summary(refused: dict[str, str], limit: int = 5) -> str:
    shown = [f"{rel} ({why})" for rel, why in list(refused.items())[:limit]]
    more = len(refused) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _git_env(git_dir: Path) -> dict[str, str]:
    """An environment in which git reads no configuration but the repository's own (twin's)."""
    return {
        "GIT_AUTHOR_NAME": "twin",
        "GIT_AUTHOR_EMAIL": "twin@localhost",
        "GIT_COMMITTER_NAME": "twin",
        "GIT_COMMITTER_EMAIL": "twin@localhost",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(git_dir),
        "LC_ALL": "C",
    }
