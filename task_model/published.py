"""Loading a task as published (Harbor layout without twin's `[metadata.twin]`).

Published migration tasks (T2J-Bench's among them) put everything in the agent's
image through `environment/Dockerfile`: the original (e.g. `COPY torch_orig
/app/torch_orig`), a checkpoint (`COPY checkpoint /app/checkpoint`), and an
instruction that names where the port goes (`/app/jax_repo/`). This module reads
that layout (`task_model.dockerfile`) and finds, by convention:

- the original: the laid-out directory whose Python code imports the source framework;
- the assets: the laid-out directory holding checkpoints (`*.safetensors`, `*.pt`, …);
- the output: the directory under the Dockerfile's paths that the instruction names
  and nothing lays out (preferring one named after the target framework).

Each can be set in a settings file (`--settings twin.toml`, or `--task twin.toml`
with `task = "DIR"` in it), so the task directory stays unchanged. The result is
the same `Task` the rest of twin uses, with `Task.environment` holding the layout.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from task_model.distribution import materialize
from task_model.distribution_install import declared_original, dockerfile_fetch_run
from task_model.dockerfile import DockerfileError, normalized_run, read_dockerfile
from task_model.layout import command_workdir
from task_model.model import (
    EnvironmentLayout,
    LaidOut,
    Task,
    TaskError,
    TwinTaskSettings,
    check_task_paths,
    published_twin_keys,
    task_name,
)
from task_model.reference_env import built, held_torch, reference_site
from task_model.reference_lock import dockerfile_lock_run

CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".npz", ".npy", ".h5", ".msgpack", ".gguf")
# top-level directories an instruction names that are never the output (system, grader, oracle)
NOT_OUTPUT_TOPS = {"usr", "bin", "sbin", "lib", "lib64", "etc", "proc", "dev", "sys", "tmp", "var", "tests", "logs",
                   "solution", "opt", "root", "home", "run", "mnt"}  # fmt: skip
_PATH = re.compile(r"(?<![\w./-])(/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*)/?")


class PublishedSettings(BaseModel):
    """A settings file for a published task (`twin.toml`); every key is optional."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = Field(default=None, description="The task directory (when passed as --task).")
    original: str | None = Field(
        default=None, description="Where the original is inside the image (e.g. /app/torch_orig)."
    )
    assets: str | None = Field(default=None, description="Where the assets are inside the image ('' for none).")
    output: str | None = Field(
        default=None, description="Where the candidate goes inside the image (e.g. /app/jax_repo)."
    )
    ignore_run: bool = Field(default=False, description="Accept RUN instructions twin cannot honour, with a note.")
    source_framework: str = Field(default="torch", description="The stack migrated away from.")
    target_framework: str = Field(default="jax", description="The stack migrated to.")
    forbidden_packages: list[str] | None = Field(
        default=None, description="Absent on the candidate side (default: the source framework)."
    )


def setting_flags(original: str | None, assets: str | None, output: str | None) -> dict[str, str]:
    """Settings given as command-line flags (`--original-dir` …); those not given are left out."""
    return {k: v for k, v in {"original": original, "assets": assets, "output": output}.items() if v is not None}


def read_settings(path: Path) -> PublishedSettings:
    """Read a settings file.

    Raises:
        TaskError: missing, not TOML, or an unknown key.
    """
    if not path.is_file():
        raise TaskError(f"settings file not found: {path}")
    try:
        return PublishedSettings(**tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"malformed settings file {path}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskError(f"bad key {where} in settings file {path}: {first['msg']}") from None


def task_of_settings_file(path: Path) -> Path:
    """The task directory a settings file names (`task = "DIR"`, relative to the file).

    Raises:
        TaskError: the file names no task.
    """
    settings = read_settings(path)
    if not settings.task:
        raise TaskError(f'{path} is not a task directory and names no task (task = "DIR")')
    return (path.parent / settings.task).resolve()


def published_settings(settings_file: Path | str | None, overrides: dict[str, str] | None = None) -> PublishedSettings:
    """The settings a published task is read with: its settings file (if any), flags on top.

    Raises:
        TaskError: the settings file cannot be read, or a setting is malformed.
    """
    settings = read_settings(Path(settings_file)) if settings_file is not None else PublishedSettings()
    if overrides:
        try:
            settings = PublishedSettings(**{**settings.model_dump(exclude_unset=True), **overrides})
        except ValidationError as exc:
            raise TaskError(f"bad setting {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from None
    return settings


def load_published_task(
    root: Path, config: dict, instruction: str, settings: PublishedSettings, *, image: str | None = None
) -> Task:
    """A `Task` for a published task directory (see the module docstring).

    Args:
        image: the image the docker sandbox built from the task's `environment/`: it honours
            the Dockerfile's RUN steps, and becomes the task's `image`.

    Raises:
        TaskError: no Dockerfile, an instruction it cannot honour, or an original,
            assets or output that cannot be found (each one line).
    """
    dockerfile = root / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        raise TaskError(
            f"task {root.name}: no [metadata.twin] and no environment/Dockerfile: cannot tell where the original is"
        )
    declared, honoured = _declared_original(root, config)
    try:
        layout = read_dockerfile(dockerfile, ignore_run=settings.ignore_run, image=image, honoured=honoured)
    except DockerfileError as exc:
        raise exc.prefixed(f"task {root.name}") from None
    if declared is not None and not any(c.host == declared for c in layout.copies):
        raise TaskError(
            f"task {root.name}: task.toml declares an original, but no RUN of its Dockerfile fetches it as twin "
            f"would write it (as `twin task new --source pypi:NAME==VERSION` does)"
        )
    if not layout.copies:
        raise TaskError(f"task {root.name}: the Dockerfile copies nothing into the image (no original)")
    original = _find_original(root, layout, settings)
    assets = _find_assets(root, layout, settings, original)
    output = _find_output(root, layout, instruction, settings)
    for laid in layout.copies:
        if _overlaps(laid.inside, output):
            raise TaskError(
                f"task {root.name}: the output {output} overlaps {laid.inside}, which the Dockerfile lays out"
            )
    forbidden = settings.forbidden_packages or [settings.source_framework]
    from_cache = declared is not None and original.host == declared
    twin = _settings(
        root,
        config,
        source_dir="environment/source" if from_cache else str(_relative(root, original.host)),
        source_mount=original.inside,
        assets_dir=str(_relative(root, assets.host)) if assets is not None else None,
        assets_mount=assets.inside if assets is not None else "/assets",
        candidate_mount=output,
        source_framework=settings.source_framework,
        target_framework=settings.target_framework,
        forbidden_packages=forbidden,
        reference_packages=[settings.source_framework],
        allow_network=False,
    )
    check_task_paths(root, twin, dockerfile)  # the same containment as twin's own layout
    task = Task(
        root=root,
        name=task_name(config, root),
        instruction=instruction,
        settings=twin,
        verifier_timeout_s=float(config.get("verifier", {}).get("timeout_sec", 600.0)),
        agent_timeout_s=float(config.get("agent", {}).get("timeout_sec", 3600.0)),
        environment=layout,
        image=image,
        original_dir=declared if from_cache else None,
    )
    if layout.workdir != "/" and command_workdir(task) is None:
        layout.notes.append(
            f"WORKDIR {layout.workdir}: nothing is laid out there; commands start in {output} instead"
        )
    return task


def _settings(root: Path, config: dict, **layout) -> TwinTaskSettings:
    """twin's settings of a published task: its layout, plus the interface and probe files its
    `[metadata.twin]` may state (`task_model.model.PUBLISHED_TWIN_KEYS`)."""
    own = config.get("metadata", {}).get("twin", {}) if published_twin_keys(config.get("metadata", {})) else {}
    try:
        return TwinTaskSettings(**layout, **own)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskError(f"task {root.name}: bad [metadata.twin] {where} in task.toml: {first['msg']}") from None


def _declared_original(root: Path, config: dict) -> tuple[Path | None, dict[str, LaidOut | None]]:
    """A declared original's laid-out files, and the RUN text of the Dockerfile that lays them out.

    Raises:
        TaskError: a malformed declaration; `DistributionError` where it cannot be fetched.
    """
    if not published_twin_keys(config.get("metadata", {})):
        return None, {}
    original = declared_original(config, f"task {root.name}")
    if original is None:
        return None, {}
    host = materialize(original)
    run = normalized_run(dockerfile_fetch_run(original, str(original.mount)))
    honoured: dict[str, LaidOut | None] = {run: LaidOut(host=host, inside=str(original.mount))}
    if reference_site(original) is not None:  # built (else none is needed, or this says how to build it)
        env = built(original)
        for text in dockerfile_lock_run(env.lock if env is not None else [], held_torch()[0]):
            honoured[normalized_run(text)] = None
    return host, honoured


def _relative(root: Path, host: Path) -> Path:
    try:
        return host.resolve().relative_to(root)
    except ValueError:
        raise TaskError(f"task {root.name}: {host} lies outside the task directory") from None


def _overlaps(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def _chosen(root: Path, layout: EnvironmentLayout, inside: str, what: str) -> LaidOut:
    for laid in layout.copies:
        if laid.inside == inside.rstrip("/") and laid.host.is_dir():
            return laid
    laid_out = ", ".join(c.inside for c in layout.copies if c.host.is_dir()) or "none"
    raise TaskError(f"task {root.name}: {what} {inside} is not a directory the Dockerfile lays out ({laid_out})")


def imports_framework(directory: Path, framework: str) -> bool:
    """Whether any Python file under `directory` imports `framework` (read, never run)."""
    for path in directory.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == framework for a in node.names):
                return True
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == framework:
                return True
    return False


def _find_original(root: Path, layout: EnvironmentLayout, settings: PublishedSettings) -> LaidOut:
    if settings.original:
        return _chosen(root, layout, settings.original, "original")
    found = [c for c in layout.copies if c.host.is_dir() and imports_framework(c.host, settings.source_framework)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise TaskError(
            f"task {root.name}: no directory the Dockerfile lays out imports {settings.source_framework}; "
            "set original in --settings"
        )
    raise TaskError(
        f"task {root.name}: several laid-out directories import {settings.source_framework} "
        f"({', '.join(c.inside for c in found)}); set original in --settings"
    )


def _find_assets(
    root: Path, layout: EnvironmentLayout, settings: PublishedSettings, original: LaidOut
) -> LaidOut | None:
    if settings.assets is not None:
        return _chosen(root, layout, settings.assets, "assets") if settings.assets else None
    found = [
        c for c in layout.copies
        if c.host.is_dir() and c is not original
        and any(p.suffix in CHECKPOINT_SUFFIXES for p in c.host.rglob("*") if p.is_file())
    ]  # fmt: skip
    if len(found) > 1:
        named = [c for c in found if re.search(r"checkpoint|ckpt|weights|assets", c.inside)]
        found = named if len(named) == 1 else found
    if len(found) > 1:
        raise TaskError(
            f"task {root.name}: several laid-out directories hold checkpoints "
            f"({', '.join(c.inside for c in found)}); set assets in --settings"
        )
    return found[0] if found else None


def _find_output(root: Path, layout: EnvironmentLayout, instruction: str, settings: PublishedSettings) -> str:
    if settings.output:
        output = settings.output.rstrip("/") or "/"
        if not output.startswith("/") or output == "/":
            raise TaskError(f"settings: output must be an absolute directory, not {settings.output!r}")
        return output
    laid = [c.inside for c in layout.copies]
    named = []
    for match in _PATH.finditer(instruction):
        path = match.group(1).rstrip(".")
        parts = PurePosixPath(path).parts
        if parts[1] in NOT_OUTPUT_TOPS or path == layout.workdir or "." in parts[-1]:
            continue
        if any(_overlaps(path, p) and PurePosixPath(path) not in PurePosixPath(p).parents for p in laid):
            continue  # a laid-out path or something inside one
        if path not in named:
            named.append(path)
    named = [p for p in named if not any(PurePosixPath(o) in PurePosixPath(p).parents for o in named)]
    if len(named) > 1:
        target = [p for p in named if settings.target_framework.lower() in PurePosixPath(p).name.lower()]
        named = target if len(target) == 1 else named
    if len(named) == 1:
        return named[0]
    if not named:
        raise TaskError(
            f"task {root.name}: the instruction names no output directory outside what the Dockerfile "
            "lays out; set output in --settings"
        )
    raise TaskError(
        f"task {root.name}: the instruction names several output directories ({', '.join(named)}); "
        "set output in --settings"
    )
