"""The candidate repository: a git history kept outside the files the Migrator can write.

The work tree is `runs/<id>/candidate/`; its git directory is `runs/<id>/candidate.git`,
which no sandbox mounts, so no role can rewrite the round history. `candidate/.git`
is a pointer file so that plain `git` works there for a person.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

from harness.errors import TwinError


class CandidateRepoError(TwinError):
    """A git operation on the candidate failed."""


class CandidateRepo:
    """Commits and tags one snapshot per round; exports snapshots for grading."""

    def __init__(self, work_tree: Path, git_dir: Path) -> None:
        self.work_tree = work_tree
        self.git_dir = git_dir

    def _git(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", *args],
            capture_output=True,
            text=True,
            env={
                "GIT_AUTHOR_NAME": "twin",
                "GIT_AUTHOR_EMAIL": "twin@localhost",
                "GIT_COMMITTER_NAME": "twin",
                "GIT_COMMITTER_EMAIL": "twin@localhost",
                "PATH": "/usr/bin:/bin:/usr/local/bin",
                "HOME": str(self.git_dir),
            },
        )
        if check and proc.returncode != 0:
            raise CandidateRepoError(f"git {args[0]} failed: {proc.stderr.strip()[:300]}")
        return proc.stdout.strip()

    def init(self) -> None:
        """Create the repository with an empty root commit (idempotent)."""
        self.work_tree.mkdir(parents=True, exist_ok=True)
        if (self.git_dir / "HEAD").exists():
            return
        subprocess.run(["git", "init", "-q", "--bare", str(self.git_dir)], check=True)
        self._git("config", "core.bare", "false")
        exclude = self.git_dir / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text(".git\n__pycache__/\n*.pyc\n")
        (self.work_tree / ".git").write_text(f"gitdir: {self.git_dir}\n")
        self._git("commit", "-q", "--allow-empty", "-m", "round 0: empty candidate")
        self._git("tag", "-f", "round-0")

    def commit_round(self, round: int, message: str) -> str:
        """Commit everything in the work tree as round `round`, tag it `round-N`, return the sha."""
        self._git("add", "-A", ".")
        self._git("commit", "-q", "--allow-empty", "-m", f"round {round}: {message}")
        self._git("tag", "-f", f"round-{round}")
        return self.head()

    def head(self) -> str:
        return self._git("rev-parse", "HEAD")

    def rounds(self) -> list[int]:
        """Round numbers that have a tag, ascending."""
        tags = self._git("tag", "--list", "round-*").split()
        return sorted(int(t.removeprefix("round-")) for t in tags)

    def changed(self, a: int, b: int) -> bool:
        """Whether the trees of rounds a and b differ."""
        return bool(self._git("diff", "--name-only", f"round-{a}", f"round-{b}"))

    def diff_stat(self, a: int, b: int) -> list[str]:
        """The files that differ between rounds a and b, as `path (+added -deleted)`."""
        lines = []
        for row in self._git("diff", "--numstat", f"round-{a}", f"round-{b}").splitlines():
            added, deleted, path = row.split("\t", 2)
            lines.append(f"{path} (binary)" if added == "-" else f"{path} (+{added} -{deleted})")
        return lines

    def reset_to(self, round: int) -> None:
        """Put the work tree back to round `round` exactly (discarding a half-done step)."""
        self._git("reset", "-q", "--hard", f"round-{round}")
        self._git("clean", "-q", "-fdx", "-e", ".git")

    def files(self) -> list[str]:
        """Tracked and untracked files of the work tree (for prompts)."""
        listed = self._git("ls-files", "--cached", "--others", "--exclude-standard")
        return [name for name in listed.splitlines() if name]

    def export(self, round: int, dest: Path) -> Path:
        """Write the snapshot of round `round` to `dest` (no git metadata)."""
        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(suffix=".tar") as archive:
            self._git("archive", "--format=tar", "-o", archive.name, f"round-{round}")
            with tarfile.open(archive.name) as tar:
                tar.extractall(dest, filter="data")
        return dest
