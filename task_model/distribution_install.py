"""What a declared original needs besides its files: its runtime requirements, and its image's RUN steps.

The requirements are read from the wheel's metadata (`runtime_requirements`) and installed
into the original's own reference environment, never into twin's interpreter
(`task_model.reference_env`); `scripts/setup.sh` does it once, through `twin task fetch`,
for every bundled task that declares an original, so that no run needs an index. A
published task's image does the same in its Dockerfile (`dockerfile_fetch_run`, and the
lock of the reference environment, `reference_env.dockerfile_lock_run`).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version
from pydantic import ValidationError

from task_model.distribution import (
    DistributionError,
    OriginalDistribution,
    download,
    file_sha256,
    keep_wheel,
    select_members,
)
from task_model.original import LICENSE, MAX_LICENSE

PINNED = "torch"
"""The package every dependency install holds at the build installed here."""


def wheel_metadata(wheel: Path) -> dict[str, list[str]]:
    """The wheel's METADATA fields, each a list of its values (`Requires-Dist`, `License`, …)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if name is None:
            raise DistributionError(f"{wheel.name} has no METADATA")
        message = Parser().parsestr(archive.read(name).decode("utf-8", errors="replace"))
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(str(value))
    return fields


def runtime_requirements(wheel: Path) -> list[str]:
    """The wheel's runtime requirements on this interpreter (no extras, markers evaluated)."""
    wanted = []
    for text in wheel_metadata(wheel).get("Requires-Dist", []):
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            raise DistributionError(f"{wheel.name}: unreadable requirement {text!r}") from None
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            wanted.append(str(requirement))
    return wanted


def missing_requirements(requirements: list[str]) -> list[str]:
    """The requirements this interpreter's environment does not satisfy."""
    missing = []
    for text in requirements:
        requirement = Requirement(text)
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(text)
            continue
        if not requirement.specifier.contains(Version(installed), prereleases=True):
            missing.append(text)
        elif requirement.extras and missing_requirements(_extra_requirements(requirement)):
            missing.append(text)
    return missing


def _extra_requirements(requirement: Requirement) -> list[str]:
    """What the installed distribution requires for the extras `requirement` names."""
    wanted = []
    for text in importlib.metadata.requires(requirement.name) or []:
        nested = Requirement(text)
        if nested.marker is not None and any(nested.marker.evaluate({"extra": e}) for e in requirement.extras):
            if not nested.marker.evaluate({"extra": ""}):
                wanted.append(str(Requirement(f"{nested.name}{nested.specifier}")))
    return wanted


def pinned_constraint() -> str:
    """`torch==X.Y.Z`: the torch release installed here, which no install may replace.

    Raises:
        DistributionError: torch is not installed (set-up installs the pinned CPU build first).
    """
    try:
        installed = Version(importlib.metadata.version(PINNED))
    except importlib.metadata.PackageNotFoundError:
        raise DistributionError(
            f"{PINNED} is not installed in {sys.prefix}: install the pinned CPU build first (scripts/setup.sh)"
        ) from None
    return f"{PINNED}=={installed.public}"


def dockerfile_fetch_run(original: OriginalDistribution, inside: str, work: str = "/tmp/original") -> str:
    """The RUN command (text after `RUN `) that lays `original` out at `inside` in an image.

    It downloads the wheel, checks its sha256 (`sha256sum -c` fails the build on any
    other file) and copies the declared files, unmodified, to `inside`. twin, reading a
    published Dockerfile without docker, honours exactly this text for the original its
    task.toml declares (`task_model.dockerfile`).
    """
    wheel = f"{work}/{original.wheel}"
    files = " ".join(shlex.quote(f) for f in original.files)
    return (
        f"pip download --no-deps --only-binary=:all: --dest {work} {shlex.quote(original.requirement)}"
        f" && echo {shlex.quote(f'{original.sha256}  {wheel}')} | sha256sum -c -"
        f" && python -m zipfile -e {wheel} {work}/unpacked"
        f" && mkdir -p {inside} && cd {work}/unpacked && cp -r --parents {files} {inside}/"
        f" && cd / && rm -rf {work}"
    )


def declared_original(config: dict, where: str) -> OriginalDistribution | None:
    """The original a task.toml declares (`[metadata.twin.original]`), or None.

    Raises:
        DistributionError: the declaration is malformed (one line naming what).
    """
    raw = config.get("metadata", {}).get("twin", {}).get("original")
    if raw is None:
        return None
    try:
        return OriginalDistribution(**raw)
    except (ValidationError, TypeError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        why = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}" if first else str(exc)
        raise DistributionError(f"bad [metadata.twin.original] in {where}: {why}") from None


PUBLISHED_MOUNT = "/app/torch_orig"
"""Where a published task made from a distribution has its Dockerfile lay the original out."""


def declare_from_index(
    spec: str,
    files: list[str],
    *,
    mount: str | None = PUBLISHED_MOUNT,
    select: Callable[[Path], list[str]] | None = None,
) -> OriginalDistribution:
    """The declaration of `pypi:NAME==VERSION`'s files `files`, its wheel fetched and kept in the cache.

    The sha256 declared is the one of the wheel the index serves now; from then on only that
    file is accepted. `select`, given the downloaded wheel, returns the files instead (an
    import closure, `twin task new --include-closure`).

    Raises:
        DistributionError: `spec` is not `pypi:NAME==VERSION`, the index does not serve it, or a
            file of `files` is not in the wheel.
    """
    match = re.fullmatch(r"pypi:([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)", spec.strip())
    if match is None:
        raise DistributionError(f"--source {spec!r}: a distribution is given as pypi:NAME==VERSION (one exact version)")
    if not files and select is None:
        raise DistributionError(
            "--source pypi:… needs at least one --include PATH (a file or directory of the wheel) "
            "or --include-closure MODULE"
        )
    with tempfile.TemporaryDirectory(prefix="twin-download-") as tmp:
        wheel = download(f"{match[1]}=={match[2]}", Path(tmp))
        if select is not None:
            files = select(wheel)
        fields = wheel_metadata(wheel)
        stated = (fields.get("License-Expression") or fields.get("License") or [""])[0].strip()
        licence = stated.splitlines()[0].strip() if stated else ""
        if not LICENSE.fullmatch(licence) or len(licence) > MAX_LICENSE:
            licence = "NOASSERTION"  # SPDX's word for a licence the metadata states in no expression
        try:
            original = OriginalDistribution(
                distribution=match[1], version=match[2], wheel=wheel.name, sha256=file_sha256(wheel),
                license=licence, files=files, mount=mount,
            )  # fmt: skip
        except ValidationError as exc:
            raise DistributionError(f"--include: {exc.errors()[0]['msg']}") from None
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
        for wanted in original.files:
            try:
                select_members(names, [wanted], wheel.name)
            except DistributionError:
                raise DistributionError(f"--include {wanted}: {wheel.name} has no such file or directory") from None
        keep_wheel(original, wheel)
    return original


def declaration_toml(original: OriginalDistribution) -> str:
    """`[metadata.twin.original]` of task.toml for `original` (TOML basic strings are JSON's)."""
    lines = ["[metadata.twin.original]"]
    for key, value in original.model_dump(exclude_none=True).items():
        shown = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        lines.append(f"{key} = {shown}")
    return "\n".join(lines) + "\n"


def task_declaration(task_dir: Path) -> OriginalDistribution | None:
    """The original the task at `task_dir` declares (its task.toml alone is read), or None.

    Raises:
        DistributionError: no task.toml, or one that is not TOML or declares a malformed original.
    """
    toml_path = Path(task_dir).expanduser() / "task.toml"
    try:
        config = tomllib.loads(toml_path.read_text())
    except OSError:
        raise DistributionError(f"not a task: {toml_path} cannot be read") from None
    except tomllib.TOMLDecodeError as exc:
        raise DistributionError(f"malformed {toml_path}: {exc}") from None
    return declared_original(config, str(toml_path))
