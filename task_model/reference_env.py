"""The reference environment of a declared original: its runtime dependencies, apart from twin's interpreter.

A declared original's `Requires-Dist` is task text. Installing it into twin's own
interpreter would let any task run code in every later twin process (a `.pth`, a
replaced module) and bend twin's own packages to the task's pins. Instead each
original gets an environment of its own (`build`), a venv under twin's cache keyed
by the JSON of its declaration, the held torch build (its RECORD's sha256) and the
interpreter (`env_key`):

- pip is run for that venv's interpreter, which sees twin's site-packages through a
  `.pth` of the venv's own: what twin already has (torch first) is taken from there,
  and only what is missing, or needed at another version, is installed into the venv;
  pip never uninstalls outside the venv;
- resolved into a lock of exact wheels with their sha256, from the index alone, torch's
  companions at builds of the held torch, then installed from that lock alone
  (`task_model.reference_lock`); a requirement given as a URL is refused;
- after the install, every file torch's RECORD hashes is checked against it, twin's
  site-packages must list the same entries as before, and no torch may be in the venv
  under any name: no distribution called torch, and no installed file that imports as
  torch, runs at start-up or puts another folder on the path (`task_model.reference_shadow`,
  checked again each time a built environment is used).

Only the reference side (and the grader, as an image built from the task's Dockerfile
would have it) sees the venv's site-packages, read-only and first on `PYTHONPATH`
(`ground.isolation`); no twin process imports from it. The Dockerfile `twin task new`
writes installs the same lock (`reference_lock.dockerfile_lock_run`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import venv
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from ground.host_dirs import cache_root
from task_model.distribution import DistributionError, fetch_wheel, file_sha256
from task_model.original import OriginalDistribution
from task_model.reference_lock import PINNED, Locked, companion_pins, install, resolve
from task_model.reference_shadow import BASE_PTH, command_shadowing, shadowing

LOCK = "lock.json"
"""The lock a built environment was installed from (written last: its presence means built)."""

Say = Callable[[str], None]


class ReferenceEnv(BaseModel):
    """A built reference environment."""

    root: Path = Field(description="The venv.")
    site: Path = Field(description="Its site-packages: what the reference side puts first on PYTHONPATH.")
    lock: list[Locked] = Field(description="What was installed into it (empty: twin's interpreter had everything).")


def held_torch() -> tuple[str, Path]:
    """The torch installed in twin's interpreter: its full version (`2.13.0+cpu`) and its RECORD.

    Raises:
        DistributionError: torch is not installed (set-up installs the pinned CPU build first).
    """
    try:
        dist = importlib.metadata.distribution(PINNED)
    except importlib.metadata.PackageNotFoundError:
        raise DistributionError(
            f"{PINNED} is not installed in {sys.prefix}: install the pinned CPU build first (scripts/setup.sh)"
        ) from None
    record = next((f for f in dist.files or [] if f.name == "RECORD" and f.parent.name.endswith(".dist-info")), None)
    if record is None:
        raise DistributionError(f"{PINNED} in {sys.prefix} has no RECORD: reinstall it with pip")
    record = Path(str(dist.locate_file(record)))
    return dist.version, record


def env_key(original: OriginalDistribution) -> dict[str, object]:
    """What a reference environment is made from: the declaration, the held torch build, the interpreter."""
    version, record = held_torch()
    return {
        "original": original.model_dump(include={"distribution", "version", "wheel", "sha256"}),
        "torch": {"version": version, "record_sha256": _sha256(record)},
        "python": sys.implementation.cache_tag,
        "base": sysconfig.get_paths()["purelib"],
    }


def env_dir(original: OriginalDistribution) -> Path:
    """Where `original`'s reference environment is (whether or not it is built)."""
    key = hashlib.sha256(json.dumps(env_key(original), sort_keys=True).encode()).hexdigest()[:32]
    return cache_root() / "reference-envs" / f"{canonicalize_name(original.distribution)}-{original.version}-{key}"


def site_of(root: Path) -> Path:
    """The site-packages of the venv at `root`."""
    return root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def built(original: OriginalDistribution) -> ReferenceEnv | None:
    """`original`'s reference environment, if it is built for the torch held now; else None (no torch: None).

    Raises:
        DistributionError: the built environment holds something that could stand in for the
            held torch (one line naming it and the distribution that installed it).
    """
    try:
        root = env_dir(original)
    except DistributionError:
        return None
    try:
        lock = [Locked(**entry) for entry in json.loads((root / LOCK).read_text())]
    except (OSError, ValueError, TypeError):
        return None
    _refuse_shadowing(root, original)
    return ReferenceEnv(root=root, site=site_of(root), lock=lock)


def _base_lines() -> list[str]:
    """What twin's own `.pth` in each environment holds: its interpreter's site-packages, the held torch's."""
    base = sysconfig.get_paths()
    return list(dict.fromkeys([base["purelib"], base["platlib"]]))


def _refuse_shadowing(root: Path, original: OriginalDistribution) -> None:
    """Refuse an environment in which anything but the held torch could import as torch, or a script
    stand in for the interpreter or a shell (`reference_shadow`).

    Raises:
        DistributionError: one line naming the entry and the distribution that installed it.
    """
    site = site_of(root)
    why = shadowing(site, _base_lines()) or command_shadowing(root, site)
    if why is not None:
        raise DistributionError(f"the reference environment of {original.requirement}: {why}: refused")


def requirements_of(original: OriginalDistribution) -> list[str]:
    """The original's runtime requirements on this interpreter (none where it declares `dependencies = false`).

    Raises:
        DistributionError: a requirement given as a URL or a file (a direct reference): one line.
    """
    from task_model.distribution_install import runtime_requirements

    if not original.dependencies:
        return []
    wanted = runtime_requirements(fetch_wheel(original))
    for text in wanted:
        requirement = Requirement(text)
        if requirement.url is not None:
            raise DistributionError(
                f"{original.requirement} requires {requirement.name} from a URL ({requirement.url[:80]}): refused, "
                "only the index's wheels are installed"
            )
    return wanted


def needs_env(original: OriginalDistribution) -> bool:
    """Whether the reference side needs an environment beyond twin's interpreter for `original`."""
    from task_model.distribution_install import missing_requirements

    return bool(missing_requirements(requirements_of(original)))


def build(original: OriginalDistribution, say: Say = lambda _line: None) -> ReferenceEnv:
    """`original`'s reference environment: the built one, else made now (see the module docstring).

    Raises:
        DistributionError: a direct reference, no matching companion build, pip failing, or torch's
            files or twin's site-packages changed (one line each); nothing is kept then.
    """
    ready = built(original)
    if ready is not None:
        return ready
    requirements = requirements_of(original)
    torch_version, record = held_torch()
    target = env_dir(original)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(staging)
        base = sysconfig.get_paths()
        (site_of(staging) / BASE_PTH).write_text("".join(f"{p}\n" for p in _base_lines()))
        _check_torch(record, f"before installing the dependencies of {original.requirement}")
        before = _entries(Path(base["purelib"]))
        lock: list[Locked] = []
        if requirements:
            say(f"resolving the dependencies of {original.requirement} ({PINNED}=={torch_version} held)")
            constraints = [f"{PINNED}=={torch_version}"]
            lock = resolve(staging, original, requirements, constraints)
            pins = companion_pins(lock, torch_version)
            if pins:
                lock = resolve(staging, original, requirements, [*constraints, *pins])
                companion_pins(lock, torch_version, final=True)
            if lock:
                say(f"installing {len(lock)} wheels into its reference environment")
                install(staging, original, lock)
        _check_torch(record, f"after installing the dependencies of {original.requirement}")
        if _entries(Path(base["purelib"])) != before:
            raise DistributionError(
                f"installing the dependencies of {original.requirement} changed twin's site-packages: refused"
            )
        _refuse_shadowing(staging, original)
        if any(canonicalize_name(p.name.split("-")[0]) == PINNED for p in site_of(staging).iterdir()):
            raise DistributionError(f"the reference environment of {original.requirement} holds a {PINNED}: refused")
        (staging / LOCK).write_text(json.dumps([entry.model_dump() for entry in lock], indent=1))
        _readable(staging)
        try:
            staging.rename(target)
        except OSError:
            if built(original) is None:
                raise
            shutil.rmtree(staging, ignore_errors=True)  # built at the same time elsewhere
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise DistributionError(
            f"cannot build the reference environment of {original.requirement} in {target.parent} "
            f"({exc.strerror or exc}): set TWIN_CACHE_DIR to a writable directory"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    ready = built(original)
    assert ready is not None
    return ready


def _check_torch(record: Path, when: str) -> None:
    """Every file torch's RECORD hashes still has that hash.

    Raises:
        DistributionError: a file missing or changed (one line naming it).
    """
    site = record.parent.parent
    try:
        rows = list(csv.reader(record.read_text().splitlines()))
    except OSError as exc:
        raise DistributionError(f"cannot read {record} ({exc.strerror}) {when}") from None
    for row in rows:
        if len(row) < 2 or not row[1].startswith("sha256="):
            continue
        try:
            digest = bytes.fromhex(file_sha256(site / row[0]))
        except OSError:
            raise DistributionError(f"{PINNED}'s file {row[0]} is missing {when}: reinstall {PINNED}") from None
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != row[1].removeprefix("sha256="):
            raise DistributionError(f"{PINNED}'s file {row[0]} differs from its RECORD {when}: reinstall {PINNED}")


def _entries(site: Path) -> list[str]:
    """The names in a site-packages directory (a new `.pth` or package shows here)."""
    return sorted(os.listdir(site))


def _readable(root: Path) -> None:
    """Make a built environment readable (and only readable) to the sandbox uid."""
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference_site(original: OriginalDistribution | None) -> Path | None:
    """The site-packages the reference side puts first on PYTHONPATH for `original` (None: none needed).

    Raises:
        DistributionError: the original needs packages twin's interpreter lacks and its reference
            environment is not built for the torch held now (one line: run `twin task fetch`).
    """
    if original is None:
        return None
    ready = built(original)
    if ready is not None:
        return ready.site
    if needs_env(original):
        raise DistributionError(
            f"the reference environment of {original.requirement} is not built for the torch held here: "
            "run `twin task fetch TASK` once (it needs the package index)"
        )
    return None
