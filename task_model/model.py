"""A task in Harbor format, split into what the agent may see and what it may not.

A task directory holds `task.toml`, `instruction.md`, `environment/` (the source
repository and assets the agent is given), `tests/` (the grader) and optionally
`solution/`. twin's own settings live in `task.toml` under `[metadata.twin]`;
see `tasks/README.md` for every key. `task_model.loader` reads a directory into
a `Task`; this module only describes one, and checks the paths its settings name.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field

from ground.errors import TwinError
from task_model.interface import TaskInterface
from task_model.original import OriginalDistribution


class TaskError(TwinError):
    """The task directory is malformed."""


class TwinTaskSettings(BaseModel):
    """`[metadata.twin]` of task.toml: where things are and how the two sides run."""

    source_dir: str = Field(
        default="environment/source",
        description="The original repository, relative to the task directory.",
    )
    source_mount: str = Field(default="/source", description="Where the original appears inside.")
    assets_dir: str | None = Field(
        default="environment/assets",
        description="Raw checkpoints and data given to the agent (None: no assets).",
    )
    assets_mount: str = Field(default="/assets", description="Where the assets appear inside.")
    candidate_mount: str = Field(
        default="/app", description="Where the candidate is written and where the grader expects it."
    )
    source_framework: str = Field(default="torch", description="The stack migrated away from.")
    target_framework: str = Field(default="jax", description="The stack migrated to.")
    forbidden_packages: list[str] = Field(
        default_factory=lambda: ["torch"],
        description="Packages physically absent on the candidate side and in the grader.",
    )
    reference_packages: list[str] = Field(
        default_factory=lambda: ["torch"],
        description="Packages the reference side needs (present there only).",
    )
    allow_network: bool = Field(default=False, description="Whether commands may reach a network.")
    interface: TaskInterface = Field(
        default_factory=TaskInterface,
        description="[metadata.twin.interface]: functions and entry points generic checks are derived from.",
    )
    probes: list[Literal["python", "http", "process"]] | None = Field(
        default=None,
        description="Probe families that apply ('python', 'http', 'process'); None: inferred from the source.",
    )
    services: dict[str, dict] = Field(
        default_factory=dict,
        description=(
            "Per service probe kind ('http', 'process', 'python_api'), how each side is started: "
            "{'reference': {...}, 'candidate': {...}} driver settings (probes.services.session)."
        ),
    )
    probe_files: list[str] = Field(
        default_factory=list,
        description=(
            "Probe files (relative to the task directory) `twin probe` runs unless --no-task-probes; "
            "twin's, never the agent's: `twin task new` lists the grader's copies in tests/probes/."
        ),
    )
    candidate_import_roots: list[str] | None = Field(
        default=None,
        description=(
            "Directories of the candidate (relative to it) put on sys.path, as the instruction says its "
            "modules are imported (['jax_repo']: jax_repo/model.py is `model`). None: inferred from the "
            "candidate's layout (probes.layout)."
        ),
    )
    original: OriginalDistribution | None = Field(
        default=None,
        description=(
            "[metadata.twin.original]: the original as a pinned distribution of the package index, laid "
            "out from twin's cache instead of source_dir (task_model.distribution)."
        ),
    )
    reference_check: str | None = Field(
        default=None,
        description=(
            "The task's recorder of its references (relative to the task directory, e.g. "
            "'tests/record_refs.py'), which given `--check` records them again from the original and "
            "prints a `drifted: QUANTITY …` line (exit 1) for each frozen one it no longer gives within "
            "its noise; `twin task check` runs it on the reference side."
        ),
    )
    oracle_min_reward: float = Field(
        default=0.97,
        ge=0.0,
        le=1.0,
        description="The least reward the task's oracle must get from its grader (`twin task check`).",
    )


class LaidOut(BaseModel):
    """One file or directory a task's Dockerfile places in the agent's image."""

    host: Path = Field(description="Where it is on the host (inside the build context).")
    inside: str = Field(description="Where the Dockerfile puts it, e.g. /app/checkpoint.")


class EnvironmentLayout(BaseModel):
    """What a published task's `environment/Dockerfile` lays out, as twin honours it without docker."""

    dockerfile: Path = Field(description="The Dockerfile read.")
    copies: list[LaidOut] = Field(
        default_factory=list, description="COPY/ADD results in order (later ones on top)."
    )
    workdir: str = Field(default="/", description="The last WORKDIR.")
    env: dict[str, str] = Field(default_factory=dict, description="ENV values, after ARG/ENV expansion.")
    notes: list[str] = Field(
        default_factory=list, description="One line per instruction accepted with a caveat."
    )


class Task(BaseModel):
    """A loaded task: visible paths (instruction, source, assets) and hidden ones (tests, solution)."""

    root: Path = Field(description="The task directory, resolved.")
    name: str = Field(description="Task name (directory name unless task.toml says otherwise).")
    instruction: str = Field(description="Text of instruction.md, what the agent is asked to do.")
    settings: TwinTaskSettings = Field(description="[metadata.twin] of task.toml.")
    verifier_timeout_s: float = Field(default=600.0, description="[verifier] timeout_sec.")
    agent_timeout_s: float = Field(default=3600.0, description="[agent] timeout_sec.")
    environment: EnvironmentLayout | None = Field(
        default=None,
        description="Published layout only: what the Dockerfile lays out (None: twin's own layout).",
    )
    original_dir: Path | None = Field(
        default=None,
        description="Where a declared original (`settings.original`) is laid out in twin's cache (None: none).",
    )
    image: str | None = Field(
        default=None,
        description=(
            "Published layout under the docker sandbox only: the image built from environment/, which "
            "every sandbox of the task runs on and which honours the Dockerfile's RUN steps (None: "
            "its files are laid out without one)."
        ),
    )

    @property
    def source_dir(self) -> Path:
        """The original: a declared distribution's laid-out files, else `source_dir` of the task."""
        return self.original_dir if self.original_dir is not None else self.root / self.settings.source_dir

    @property
    def assets_dir(self) -> Path | None:
        return self.root / self.settings.assets_dir if self.settings.assets_dir else None

    @property
    def tests_dir(self) -> Path:
        return self.root / "tests"

    @property
    def solution_dir(self) -> Path | None:
        path = self.root / "solution"
        return path if path.is_dir() else None

    @property
    def extra_layout(self) -> list[LaidOut]:
        """What the Dockerfile lays out besides the original and the assets (mounted as is)."""
        if self.environment is None:
            return []
        own = {self.settings.source_mount, self.settings.assets_mount}
        return [c for c in self.environment.copies if c.inside not in own]

    @property
    def hidden_roots(self) -> list[Path]:
        """Everything no role, tool or command may see: grader, solution, task.toml."""
        return hidden_roots(self.root)


def hidden_roots(root: Path) -> list[Path]:
    """What no role, tool or command may see of the task at `root`: tests/, task.toml, solution/ if any."""
    hidden = [root / "tests", root / "task.toml"]
    if (root / "solution").is_dir():
        hidden.append(root / "solution")
    return hidden


PUBLISHED_TWIN_KEYS = frozenset({"interface", "probe_files", "original"})
"""Keys of `[metadata.twin]` a published task may hold: its layout still comes from its Dockerfile."""


def published_twin_keys(metadata: dict) -> bool:
    """Whether `[metadata.twin]` holds only keys a published task may have (and at least one)."""
    twin = metadata.get("twin")
    if not (isinstance(twin, dict) and bool(twin) and set(twin) <= PUBLISHED_TWIN_KEYS):
        return False
    original = twin.get("original")  # a published task's declared original names where its Dockerfile puts it
    return original is None or (isinstance(original, dict) and "mount" in original)


def task_name(config: dict, root: Path) -> str:
    """The task's name: `[task] name` of task.toml, else the directory's name."""
    return str(config.get("task", {}).get("name", root.name))


HIDDEN_NAMES = ("tests", "solution", "task.toml")


def check_task_paths(root: Path, settings: TwinTaskSettings, toml_path: Path) -> None:
    """Every directory a task names stays inside it, away from what the agent must not see.

    `source_dir` and `assets_dir` are relative, do not climb out with `..`, resolve
    (symlinks followed) inside the task directory, and neither are, contain nor lie in
    `tests/`, `solution/` or `task.toml`. Mount points are absolute and not `/`.

    Raises:
        TaskError: one line naming the key and what is wrong with it.
    """
    hidden = [os.path.realpath(root / name) for name in HIDDEN_NAMES]
    for value in settings.probe_files:
        pure = PurePosixPath(value)
        resolved = os.path.realpath(root / value)
        if pure.is_absolute() or ".." in pure.parts or not resolved.startswith(str(root) + os.sep):
            raise TaskError(
                f"[metadata.twin] probe_files entry {value!r} in {toml_path}: must be a file inside the task directory"
            )
    for key in ("source_dir", "assets_dir"):
        value = getattr(settings, key)
        if value is None or (key == "assets_dir" and not value) or (key == "source_dir" and settings.original):
            continue  # no assets; a declared original is laid out from twin's cache
        where = f"[metadata.twin] {key} = {value!r} in {toml_path}"
        pure = PurePosixPath(value)
        if pure.is_absolute() or "\0" in value:
            raise TaskError(f"{where}: must be a path relative to the task directory")
        if ".." in pure.parts:
            raise TaskError(f"{where}: must not climb out of the task directory with '..'")
        resolved = os.path.realpath(root / value)
        if resolved != str(root) and not resolved.startswith(str(root) + os.sep):
            raise TaskError(f"{where}: resolves outside the task directory (through a symlink)")
        for secret in hidden:
            if resolved == secret or resolved.startswith(secret + os.sep) or secret.startswith(resolved + os.sep):
                name = os.path.basename(secret)
                raise TaskError(f"{where}: must not be, contain or lie inside the task's {name}")
    for key in ("source_mount", "assets_mount", "candidate_mount"):
        value = getattr(settings, key)
        if not PurePosixPath(value).is_absolute() or os.path.normpath(value) == "/":
            raise TaskError(f"[metadata.twin] {key} = {value!r} in {toml_path}: must be an absolute path other than /")
