"""A task's original declared as a pinned registry distribution, and laid out from twin's cache.

A real project's code reaches a task as a distribution from the package index, never as
files committed beside the task. `task.toml` declares it (`[metadata.twin.original]`):
the distribution, its exact version, the wheel's file name and sha256, its licence, and
which of its files are the task's original. `materialize` lays those files out, unmodified
and at the paths they have in the wheel, in twin's cache (`cache_root()/originals/`), and
every reader of the task's source (workspace, probes' reference side, grader layouts)
sees that directory exactly as it would see `environment/source/`.

The first use downloads the wheel with pip from the configured index (`pip download
--no-deps --only-binary=:all:`), checks its sha256, and keeps it
(`cache_root()/distributions/<sha256>/`); the layout is built in a staging directory
beside its place and renamed into it, so an interrupted fetch leaves nothing half
written. After that, no index is needed. Wrong hash, no index and no cached copy, a
declared file the wheel lacks: one line (`DistributionError`), nothing cached.

Its runtime dependencies, and a published image's RUN steps: `distribution_install`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from ground.host_dirs import cache_root
from task_model.model import TaskError
from task_model.original import OriginalDistribution


class DistributionError(TaskError):
    """A declared original could not be fetched, checked, laid out or given its dependencies."""


def wheels_dir() -> Path:
    """Where downloaded wheels are kept, one directory per sha256."""
    return cache_root() / "distributions"


def original_dir(original: OriginalDistribution) -> Path:
    """Where `original`'s files are laid out (whether or not they are yet)."""
    selection = "\n".join([original.sha256, *sorted(original.files)])
    key = hashlib.sha256(selection.encode()).hexdigest()[:16]
    return cache_root() / "originals" / f"{canonicalize_name(original.distribution)}-{original.version}-{key}"


def is_materialized(original: OriginalDistribution) -> bool:
    """Whether `original` is laid out in the cache (no index needed to use it)."""
    return original_dir(original).is_dir()


def materialize(original: OriginalDistribution) -> Path:
    """`original`'s files, laid out in the cache (fetched and checked first if need be).

    Raises:
        DistributionError: no index and no cached copy, a wrong hash, or a declared file the
            wheel lacks (one line each); nothing is cached then.
    """
    target = original_dir(original)
    if target.is_dir():
        return target
    try:
        wheel = fetch_wheel(original)
        _lay_out(original, wheel, target)
    except OSError as exc:
        raise DistributionError(
            f"cannot lay out {original.requirement} in {cache_root()} ({exc.strerror or exc}): "
            "set TWIN_CACHE_DIR to a writable directory"
        ) from None
    return target


def fetch_wheel(original: OriginalDistribution) -> Path:
    """The checked wheel of `original`: the cached one, else downloaded with pip and checked.

    Raises:
        DistributionError: as `materialize`.
    """
    kept = wheels_dir() / original.sha256 / original.wheel
    if kept.is_file() and file_sha256(kept) == original.sha256:
        return kept
    shutil.rmtree(kept.parent, ignore_errors=True)  # a damaged copy is fetched anew
    _make_dirs(kept.parent.parent)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=kept.parent.parent) as tmp:
        downloaded = download(original.requirement, Path(tmp))
        if downloaded.name != original.wheel:
            raise DistributionError(
                f"the index gave {downloaded.name} for {original.requirement}, not the declared {original.wheel}; "
                "nothing cached"
            )
        digest = file_sha256(downloaded)
        if digest != original.sha256:
            raise DistributionError(
                f"{original.wheel} from the index has sha256 {digest}, not the declared {original.sha256}: "
                "refused, nothing cached"
            )
        keep_wheel(original, downloaded)
    return kept


def keep_wheel(original: OriginalDistribution, wheel: Path) -> Path:
    """Move a checked `wheel` of `original` into the cache (atomically), and return where it is."""
    kept = wheels_dir() / original.sha256 / original.wheel
    _make_dirs(kept.parent.parent)
    staging = Path(tempfile.mkdtemp(prefix=".keep-", dir=kept.parent.parent))
    shutil.move(wheel, staging / original.wheel)
    (staging / original.wheel).chmod(0o644)
    _publish(staging, kept.parent)
    return kept


def download(requirement: str, dest: Path) -> Path:
    """Download the one wheel of `requirement` into `dest` with pip (its configured index).

    Raises:
        DistributionError: pip could not get it (no index reachable, no such release).
    """
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--quiet", "--dest", str(dest), requirement]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DistributionError(f"cannot download {requirement}: {exc}") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        why = last_line(proc.stderr) or f"pip exited {proc.returncode}"
        raise DistributionError(
            f"cannot download {requirement} from the package index ({why}) and no copy is cached in {cache_root()}"
        )
    return wheels[0]


def _lay_out(original: OriginalDistribution, wheel: Path, target: Path) -> None:
    """Extract the declared files into a staging directory beside `target`, then rename it into place."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DistributionError(f"cannot read {wheel.name}: {exc}") from None
    with archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
        chosen: list[str] = []
        for wanted in original.files:
            found = [n for n in names if n == wanted or n.startswith(wanted.rstrip("/") + "/")]
            if not found:
                raise DistributionError(f"{original.wheel} has no file {wanted!r} (declared in files)")
            chosen += [n for n in found if n not in chosen]
        _make_dirs(target.parent)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            for name in chosen:
                pure = PurePosixPath(name)
                if pure.is_absolute() or ".." in pure.parts:
                    raise DistributionError(f"{original.wheel} holds a path outside itself: {name!r}")
                out = staging.joinpath(*pure.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.read(name))
                out.chmod(0o644)
            _publish(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _publish(staging: Path, target: Path) -> None:
    """Rename a complete staging directory into place (a concurrent one that won is kept)."""
    for directory in [staging, *[p for p in staging.rglob("*") if p.is_dir()]]:
        directory.chmod(0o755)  # the sandbox uid reads what is mounted from here
    try:
        staging.rename(target)
    except OSError:
        if not target.is_dir():
            raise
        shutil.rmtree(staging, ignore_errors=True)


def _make_dirs(path: Path) -> None:
    for parent in [*reversed(path.parents), path]:
        if not parent.exists():
            parent.mkdir(exist_ok=True)
            parent.chmod(0o755)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def last_line(text: str) -> str:
    """The last non-blank line of a command's output, cut to one readable line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
