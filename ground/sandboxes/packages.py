"""Which entries of a site-packages directory must be absent for a package to be hidden.

Hiding a package by mounting an empty directory over it does not work: Python then
imports it as an empty namespace package. A hidden package's directory, its modules,
its distribution metadata and the other top-level names of the same distribution
(`torch` ships `functorch` and `torchgen`) must not be there at all. The sandbox
therefore mounts, over site-packages, a separate tree of it without them: hard links to the
environment's own files where the cache is on the same filesystem (`ground.linked_tree`),
a copy elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from ground import linked_tree
from ground.boundary import Mount
from ground.isolation import cache_root
from ground.sandboxes import site_copies
from ground.waiting import waiting_for

_DIST_SUFFIXES = (".dist-info", ".egg-info")


def site_dirs() -> list[Path]:
    """The site-packages directories this interpreter imports from (venv and base)."""
    dirs = [Path(p) for p in site.getsitepackages()]
    if sys.base_prefix != sys.prefix:
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        dirs.append(Path(sys.base_prefix) / "lib" / version / "site-packages")
    user = site.getusersitepackages()
    if user:
        dirs.append(Path(user))
    return [d.resolve() for d in dirs if d.is_dir()]


def copied_inside(mounts: Iterable[Mount], site_dir: Path) -> str | None:
    """`site_dir`'s own path, where a copy of it is mounted there, else None.

    An interpreter prefix the sandbox uid cannot reach (a venv under `/root`, twin as root)
    is copied and mounted at its own path (`isolation.python_mounts`): no mount's host holds
    `site_dir`, yet its copy, hidden packages and all, appears inside at the same place.
    """
    for mount in mounts:
        inside = Path(mount.inside)
        if mount.host != inside and (site_dir == inside or inside in site_dir.parents):
            return str(site_dir)
    return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_name(entry: str) -> str:
    return _normalise(entry.rsplit(".", 1)[0].split("-")[0])


def _top_levels(dist_info: Path) -> set[str]:
    """Top-level names a distribution installs (from top_level.txt, else RECORD)."""
    top_level = dist_info / "top_level.txt"
    if top_level.is_file():
        return {line.strip() for line in top_level.read_text().splitlines() if line.strip()}
    names: set[str] = set()
    record = dist_info / "RECORD"
    if record.is_file():
        for line in record.read_text(errors="replace").splitlines():
            first = line.split(",", 1)[0].split("/", 1)[0]
            if first and first != ".." and not first.endswith(_DIST_SUFFIXES):
                names.add(first.removesuffix(".py").split(".", 1)[0])
    return names


def _matches(entry: str, names: set[str]) -> bool:
    """Whether a directory entry is one of the top-level names (package, module or extension)."""
    stem = entry.removesuffix(".py").split(".", 1)[0]
    return entry in names or stem in names


@lru_cache(maxsize=64)
def hidden_entries(site_dir: Path, packages: tuple[str, ...]) -> frozenset[str]:
    """Entries of `site_dir` to leave out so that none of `packages` can be imported.

    Args:
        site_dir: a site-packages directory on the host.
        packages: top-level import names, e.g. ("torch",).
    """
    entries = [p.name for p in site_dir.iterdir()]
    wanted = set(packages)
    hidden: set[str] = set()
    for entry in entries:
        if not entry.endswith(_DIST_SUFFIXES):
            continue
        tops = _top_levels(site_dir / entry)
        if tops & wanted or _dist_name(entry) in {_normalise(p) for p in packages}:
            hidden.add(entry)
            wanted |= tops
    hidden |= {entry for entry in entries if _matches(entry, wanted)}
    return frozenset(hidden)


def pruned_site_dir(site_dir: Path, drop: frozenset[str]) -> Path | None:
    """A separate tree of `site_dir` without `drop` (built once, then reused).

    Its files are hard links to the environment's own where the cache is on the same
    filesystem, so a first run on a new cache lays out a directory tree, not gigabytes
    (`ground.linked_tree`; a copy where links cannot be made). It is only ever mounted
    read-only, so nothing writes through it to the live environment; its directories are
    twin's and lose group and other write, its files keep the environment's modes (the
    sandbox uid reads what it could read there). Mounting one such directory over
    site-packages costs one mount, where binding each kept entry back costs hundreds. The
    key covers the directory's modification time, so installing or removing a package
    builds a fresh tree. This process holds the tree until it exits; building one collects
    the stale others (`site_copies`). A build, or a wait for another process's, that lasts
    over 2 s says so on stderr. Returns None where the tree cannot be made; the sandbox then
    refuses to start.
    """
    root = cache_root() / "site-packages"
    st = site_dir.stat()
    key = hashlib.sha256(
        "\0".join(["copy-v2", str(site_dir), str(st.st_mtime_ns), *sorted(drop)]).encode()
    ).hexdigest()[:16]
    target = root / key
    staging = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        site_copies.hold(root, key)  # before looking: a copy in use is never collected
        if target.is_dir():
            return target
        hidden = ", ".join(sorted(drop)[:3]) + (", …" if len(drop) > 3 else "")
        what = f"{site_dir} laid out without {hidden} (the sandboxes' site-packages, under {root})"
        with waiting_for(what), site_copies.building(root, key):  # a second process waits, then finds it built
            if not target.is_dir():
                staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
                _copy_without(site_dir, drop, staging)
                try:
                    staging.rename(target)
                except OSError:  # built meanwhile by a process that took no build lock
                    shutil.rmtree(staging, ignore_errors=True)
                staging = None
                site_copies.record_size(root, key)
                site_copies.collect(root, current=key)
    except (OSError, subprocess.CalledProcessError):
        if staging is not None:  # a partial copy (a full disk) is gigabytes nobody would reuse
            shutil.rmtree(staging, ignore_errors=True)
        return None
    return target if target.is_dir() else None


def _copy_without(site_dir: Path, drop: frozenset[str], staging: Path) -> str:
    """Lay `site_dir` less `drop` out in `staging` (`linked_tree.lay_out`): `linked` or `copied`."""
    kept = [site_dir / e for e in sorted(os.listdir(site_dir)) if e not in drop]
    return linked_tree.lay_out(kept, staging)
