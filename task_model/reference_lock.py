"""The lock of a reference environment: resolved by pip to exact wheels with their sha256, then installed from it.

pip is run for the environment's own interpreter (`task_model.reference_env`), wheels only
(`--only-binary=:all:`: no build script runs), from the configured index alone: a resolved
file pip marks as a direct reference, or one the index gives no sha256 for, is refused.
Installing takes exactly the lock (`--require-hashes --no-deps`). torch's companions
(torchvision, torchaudio) must be builds of the held torch, with its local label (`+cpu`):
`companion_pins` asks for those, and where the index serves none, one line names the
package and what to do. The Dockerfile `twin task new` writes installs the same lock
(`dockerfile_lock_run`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field, ValidationError, field_validator

from task_model.distribution import DistributionError, last_line
from task_model.original import DISTRIBUTION_NAME, OriginalDistribution

PINNED = "torch"
"""The package every reference environment takes from twin's interpreter, unchanged."""
COMPANIONS = ("torchvision", "torchaudio")
"""Packages built against one torch build: they must carry the held torch's local label."""


class Locked(BaseModel):
    """One wheel of a reference environment's lock."""

    name: str = Field(description="The distribution's name, as its metadata gives it.")
    version: str = Field(description="The exact version installed.")
    sha256: str = Field(description="The sha256 of the wheel installed; pip refuses any other file.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DISTRIBUTION_NAME.fullmatch(value):
            raise ValueError(f"not a distribution name: {value[:80]!r}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        try:
            normal = str(Version(value)) == value
        except InvalidVersion:
            normal = False
        if not normal:
            raise ValueError(f"not a normalized version: {value[:80]!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("not a sha256")
        return value

    def line(self) -> str:
        """This wheel as a line of a requirements file pip installs with `--require-hashes`."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def companion_pins(lock: list[Locked], torch_version: str, *, final: bool = False) -> list[str]:
    """Constraints that make each companion in `lock` a build of the held torch (its local label).

    Args:
        lock: a resolution.
        torch_version: the held torch's full version (`2.13.0+cpu`).
        final: the resolution already had these constraints: a mismatch left is an error.

    Raises:
        DistributionError: (final) a companion whose matching build the index does not serve: one
            line naming the package and what to do.
    """
    local = Version(torch_version).local
    pins = []
    for entry in lock:
        name = canonicalize_name(entry.name)
        if name not in COMPANIONS or Version(entry.version).local == local:
            continue
        wanted = f"{Version(entry.version).public}+{local}" if local else Version(entry.version).public
        if final:
            raise DistributionError(companion_missing(name, wanted, torch_version, offered=entry.version))
        pins.append(f"{name}=={wanted}")
    return pins


def companion_missing(name: str, wanted: str, torch_version: str, offered: str | None = None) -> str:
    """The one line said where the index serves no build of `name` for the held torch."""
    served = f"serves {name} {offered}, not {name} {wanted}" if offered else f"serves no {name} {wanted}"
    return (
        f"{name}: the index {served} built for the torch {torch_version} held here; put the "
        f"{name}=={wanted} wheel where pip finds it (PIP_FIND_LINKS, or the index that serves torch "
        f"{torch_version}), or declare the original with dependencies = false"
    )


def resolve(root: Path, original: OriginalDistribution, requirements: list[str], constraints: list[str]):
    """What pip would install into the venv at `root` for `requirements`: exact versions with their sha256.

    Raises:
        DistributionError: pip found no resolution, or resolved a direct reference or an unhashed file.
    """
    with tempfile.TemporaryDirectory(prefix="twin-resolve-") as tmp:
        report, pinned = Path(tmp) / "report.json", Path(tmp) / "constraints.txt"
        pinned.write_text("".join(f"{c}\n" for c in constraints))
        proc = _pip(root, ["install", "--dry-run", "--report", str(report), "-c", str(pinned), *requirements])
        if proc.returncode != 0:
            companion = _companion_named(proc.stderr, constraints)
            if companion is not None:
                raise DistributionError(companion)
            raise DistributionError(
                f"cannot resolve the dependencies of {original.requirement} with {constraints[0]} held: "
                f"{last_line(proc.stderr) or f'pip exited {proc.returncode}'}"
            )
        items = json.loads(report.read_text()).get("install", [])
    lock = []
    for item in items:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        hashes = item.get("download_info", {}).get("archive_info", {}).get("hashes", {})
        if item.get("is_direct") or "sha256" not in hashes:
            raise DistributionError(
                f"{original.requirement}: {name} {version} resolves to a direct reference or a file without a "
                "sha256 from the index: refused"
            )
        if canonicalize_name(name) == PINNED:
            raise DistributionError(f"{original.requirement}: its dependencies would install another {PINNED}")
        try:
            lock.append(Locked(name=name, version=version, sha256=hashes["sha256"]))
        except ValidationError:
            raise DistributionError(
                f"{original.requirement}: pip resolved a malformed wheel name, version or hash: refused"
            ) from None
    return lock


def _companion_named(stderr: str, constraints: list[str]) -> str | None:
    """The companion line, where pip failed on a companion pin this module added (after the torch pin)."""
    for constraint in constraints[1:]:
        name, wanted = constraint.split("==")
        if name in (stderr or "").lower():
            return companion_missing(name, wanted, constraints[0].split("==")[1])
    return None


def install(root: Path, original: OriginalDistribution, lock: list[Locked]) -> None:
    """Install exactly the locked wheels into the venv at `root` (hashes required, no dependencies)."""
    with tempfile.TemporaryDirectory(prefix="twin-lock-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("".join(f"{entry.line()}\n" for entry in lock))
        proc = _pip(root, ["install", "--require-hashes", "--no-deps", "--no-compile", "-r", str(requirements)])
    if proc.returncode != 0:
        raise DistributionError(
            f"cannot install the dependencies of {original.requirement}: "
            f"{last_line(proc.stderr) or f'pip exited {proc.returncode}'}"
        )


def _pip(root: Path, args: list[str]) -> subprocess.CompletedProcess:
    """twin's pip, run for the venv at `root`: wheels only, quiet, as root without its warning."""
    argv = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "--disable-pip-version-check",
            "--quiet", *args[:1], "--only-binary=:all:", "--root-user-action=ignore", *args[1:]]  # fmt: skip
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DistributionError(f"cannot run pip for {root}: {exc}") from None


def dockerfile_lock_run(lock: list[Locked], torch_version: str) -> list[str]:
    """The Dockerfile's RUN installing exactly `lock` (hashes required), torch held at its build.

    The same wheels as the reference environment: a companion's `+cpu` build comes from the
    index that serves the CPU torch (the Dockerfile installs torch from there too).
    """
    if not lock:
        return []
    lines = " ".join(_quoted(entry.line()) for entry in lock)
    return [
        f"printf '%s\\n' {lines} > /tmp/reference-lock.txt"
        " && pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all:"
        " --extra-index-url https://download.pytorch.org/whl/cpu -r /tmp/reference-lock.txt"
        f" && python -c 'import torch; assert torch.__version__ == \"{torch_version}\"'"
    ]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
