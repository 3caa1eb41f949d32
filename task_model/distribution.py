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

import base64
import bisect
import collections
import csv
import hashlib
import json
import os
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

MAX_MEMBERS = 200_000
"""The most names a wheel may hold to be laid out."""
MAX_MEMBER_BYTES = 256 * 1024 * 1024
"""The largest file laid out (uncompressed, as streamed)."""
MAX_TOTAL_BYTES = 2 * 1024 * 1024 * 1024
"""The most bytes one layout may take (uncompressed, as streamed)."""


class DistributionError(TaskError):
    """A declared original could not be fetched, checked, laid out or given its dependencies."""


def wheels_dir() -> Path:
    """Where downloaded wheels are kept, one directory per sha256."""
    return cache_root() / "distributions"


def selection(original: OriginalDistribution) -> dict[str, object]:
    """What a layout of `original` is made from: the wheel's hash and the declared paths (normalized, sorted)."""
    return {"sha256": original.sha256, "files": sorted(PurePosixPath(f).as_posix() for f in original.files)}


def original_dir(original: OriginalDistribution) -> Path:
    """Where `original`'s files are laid out (whether or not they are yet).

    The key hashes the JSON of `selection`, never joined strings: no two declarations share it.
    """
    key = hashlib.sha256(json.dumps(selection(original), sort_keys=True).encode()).hexdigest()[:32]
    return cache_root() / "originals" / f"{canonicalize_name(original.distribution)}-{original.version}-{key}"


def manifest_path(target: Path) -> Path:
    """The record of what a layout holds, beside it (never inside what is mounted as the original)."""
    return target.with_name(target.name + ".json")


def is_materialized(original: OriginalDistribution) -> bool:
    """Whether `original` is laid out in the cache as it declares (no index needed to use it)."""
    return _layout_matches(original, original_dir(original))


def _layout_matches(original: OriginalDistribution, target: Path) -> bool:
    """Whether the cached layout at `target` was made from exactly `original`'s declaration, and is whole.

    A layout is reused only where its manifest records this declaration's selection and every
    file it lists is there with its size: a layout made for another declaration, or one that
    lost a file, is laid out again (and refused if the wheel lacks a declared file).
    """
    try:
        recorded = json.loads(manifest_path(target).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("selection") != selection(original):
        return False
    files = recorded.get("files")
    if not isinstance(files, dict):
        return False
    for name, size in files.items():
        try:
            if (target / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def materialize(original: OriginalDistribution) -> Path:
    """`original`'s files, laid out in the cache (fetched and checked first if need be).

    Raises:
        DistributionError: no index and no cached copy, a wrong hash, or a declared file the
            wheel lacks (one line each); nothing is cached then.
    """
    target = original_dir(original)
    if _layout_matches(original, target):
        return target
    if target.exists() or manifest_path(target).exists():  # another declaration's, or damaged: laid out again
        manifest_path(target).unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)
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


def select_members(names: list[str], files: list[str], wheel: str) -> list[str]:
    """The archive members `files` declares (a path: that file; a directory: every file under it).

    A set and a sorted list with bisection, never a scan of every name per declared path.

    Raises:
        DistributionError: the archive holds a name twice, or lacks a declared path.
    """
    present = set(names)
    if len(present) != len(names):
        twice = next(n for n, count in collections.Counter(names).items() if count > 1)
        raise DistributionError(f"{wheel} holds {twice!r} twice: refused")
    ordered = sorted(present)
    chosen: list[str] = []
    for wanted in files:
        if wanted in present:
            chosen.append(wanted)
            continue
        prefix = wanted.rstrip("/") + "/"
        start = bisect.bisect_left(ordered, prefix)
        end = bisect.bisect_left(ordered, prefix[:-1] + chr(ord("/") + 1), lo=start)  # the names under prefix
        found = ordered[start:end]
        if not found:
            raise DistributionError(f"{wheel} has no file {wanted!r} (declared in files)")
        chosen += found
    return chosen


def _lay_out(original: OriginalDistribution, wheel: Path, target: Path) -> None:
    """Extract the declared files into a staging directory beside `target`, then rename it into place.

    Bounded: at most `MAX_MEMBERS` names in the wheel, `MAX_MEMBER_BYTES` per file and
    `MAX_TOTAL_BYTES` in all, counted as the bytes are streamed out (whatever the archive's
    headers claim), each file hashed as it is written and checked against the wheel's RECORD.
    """
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DistributionError(f"cannot read {wheel.name}: {exc}") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise DistributionError(f"{original.wheel} holds {len(infos)} members, over {MAX_MEMBERS}: refused")
        names = [i.filename for i in infos if not i.filename.endswith("/")]
        chosen = select_members(names, original.files, original.wheel)
        record = _record_hashes(archive)
        _make_dirs(target.parent)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            sizes: dict[str, int] = {}
            for name in chosen:
                pure = PurePosixPath(name)
                if pure.is_absolute() or ".." in pure.parts:
                    raise DistributionError(f"{original.wheel} holds a path outside itself: {name!r}")
                out = staging.joinpath(*pure.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                left = MAX_TOTAL_BYTES - sum(sizes.values())
                sizes[name] = _extract(archive, name, out, min(MAX_MEMBER_BYTES, left), record.get(name), original)
                out.chmod(0o644)
            manifest = {"selection": selection(original), "files": sizes}
            _write_whole(manifest_path(target), json.dumps(manifest, sort_keys=True))
            _publish(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _extract(
    archive: zipfile.ZipFile, name: str, out: Path, cap: int, recorded: str | None, original: OriginalDistribution
) -> int:
    """Stream one member to `out` with a running sha256; its size.

    Raises:
        DistributionError: over `cap` bytes (a member's or the total's), or not the hash RECORD states.
    """
    digest = hashlib.sha256()
    size = 0
    with archive.open(name) as source, open(out, "wb") as sink:
        for block in iter(lambda: source.read(1 << 20), b""):
            size += len(block)
            if size > cap:
                raise DistributionError(
                    f"{original.wheel}: {name!r} takes the layout over its cap ({MAX_MEMBER_BYTES} bytes a file, "
                    f"{MAX_TOTAL_BYTES} in all): refused, nothing cached"
                )
            digest.update(block)
            sink.write(block)
    if recorded is not None:
        found = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
        if found != recorded:
            raise DistributionError(f"{original.wheel}: {name!r} is not the file its RECORD hashes: refused")
    return size


def _record_hashes(archive: zipfile.ZipFile) -> dict[str, str]:
    """The sha256 (urlsafe base64, unpadded) the wheel's RECORD states for each file it hashes."""
    record = next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")), None)
    if record is None or archive.getinfo(record).file_size > MAX_MEMBER_BYTES:
        return {}
    hashes = {}
    for row in csv.reader(archive.read(record).decode("utf-8", errors="replace").splitlines()):
        if len(row) >= 2 and row[1].startswith("sha256="):
            hashes[row[0]] = row[1].removeprefix("sha256=")
    return hashes


def _write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text(text)
    staging.chmod(0o644)
    staging.replace(path)


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
