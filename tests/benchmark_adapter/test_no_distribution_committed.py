"""No file of a declared distribution is committed: a task declares its original, it never holds a copy.

Every task.toml in the repository that declares `[metadata.twin.original]` names a wheel; each
file of that wheel (fetched and checked into twin's cache by `scripts/setup.sh`) is compared
with every committed file, byte for byte and with whitespace folded. Files too small to say
anything (an empty `__init__.py`) are left out.
"""

from __future__ import annotations

import hashlib
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

from benchmark_adapter.task.distribution import file_sha256, wheels_dir
from benchmark_adapter.task.original import OriginalDistribution
from tests.fakes.wheels import build_wheel

REPO = Path(__file__).resolve().parents[2]
SMALLEST = 64
"""Bytes below which a file is not compared (empty modules, one-line markers)."""


def _digests(data: bytes) -> set[str]:
    folded = b" ".join(data.split())
    return {hashlib.sha256(data).hexdigest(), "folded:" + hashlib.sha256(folded).hexdigest()}


def committed_copies(wheel: Path, committed: list[Path]) -> list[str]:
    """`committed` files whose content is a file of `wheel` (exactly, or with whitespace folded)."""
    with zipfile.ZipFile(wheel) as archive:
        known = {}
        for name in archive.namelist():
            data = archive.read(name)
            if len(data) >= SMALLEST:
                known.update(dict.fromkeys(_digests(data), name))
    found = []
    for path in committed:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        hits = [known[d] for d in _digests(data) if d in known] if len(data) >= SMALLEST else []
        if hits:
            found.append(f"{path} is {hits[0]} of {wheel.name}")
    return found


def repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in listed.decode().split("\0") if name]


def declared_originals() -> list[tuple[Path, OriginalDistribution]]:
    declared = []
    for path in repository_files():
        if path.name == "task.toml":
            raw = tomllib.loads(path.read_text()).get("metadata", {}).get("twin", {}).get("original")
            if raw is not None:
                declared.append((path, OriginalDistribution(**raw)))
    return declared


def test_the_check_finds_a_committed_copy(tmp_path):
    module = "import torch\n\n\ndef forward(x):\n    return torch.nn.functional.gelu(x) * 2.0 + 1.0\n"
    wheel = build_wheel(tmp_path / "index", {"pkg/model.py": module, "pkg/__init__.py": ""})
    copy, reflowed, own, empty = (tmp_path / n for n in ("copy.py", "reflowed.py", "own.py", "__init__.py"))
    copy.write_text(module)
    reflowed.write_text(module.replace("\n", "\r\n").replace("    ", "\t"))
    own.write_text(module.replace("2.0", "3.0"))
    empty.write_text("")
    found = committed_copies(wheel, [copy, reflowed, own, empty])
    assert [line.split(" is ")[0] for line in found] == [str(copy), str(reflowed)]


def test_no_file_of_a_declared_distribution_is_committed():
    declared = declared_originals()
    assert declared, "no task declares its original as a distribution"
    committed = repository_files()
    unchecked = []
    for toml_path, original in declared:
        wheel = wheels_dir() / original.sha256 / original.wheel  # the cached copy only: no index is asked
        if not wheel.is_file() or file_sha256(wheel) != original.sha256:
            unchecked.append(f"{original.requirement} ({toml_path.parent.name})")
            continue
        assert committed_copies(wheel, committed) == []
    if unchecked:
        pytest.skip(f"not in twin's cache (run `twin task fetch` or scripts/setup.sh): {', '.join(unchecked)}")
