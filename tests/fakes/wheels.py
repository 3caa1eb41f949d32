"""A local package index for tests: wheels built here, served to pip through --find-links.

`local_index` points pip (through its environment) at one directory and nothing else,
and twin's cache at a fresh one, so no test of a declared original reaches a network.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest


def build_wheel(
    directory: Path,
    files: dict[str, str],
    *,
    name: str = "fakeorig",
    version: str = "1.0",
    requires: tuple[str, ...] = (),
    licence: str = "Apache-2.0",
) -> Path:
    """A pure-Python wheel of `files` (path in the wheel -> text) with its metadata."""
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nLicense: {licence}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def use_index(monkeypatch, index: Path) -> None:
    """pip sees `index` (a --find-links directory) and no other index or configuration."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def local_index(monkeypatch, tmp_path) -> Path:
    """An empty local index pip is pointed at, and a fresh twin cache."""
    index = tmp_path / "index"
    index.mkdir()
    use_index(monkeypatch, index)
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    return index


def reference_pythonpath(original) -> dict[str, str]:
    """PYTHONPATH giving a host process `original`'s reference environment, as its reference side has it.

    Skips the test where the environment is needed but not built (`twin task fetch` builds it).
    """
    from task_model.distribution import DistributionError
    from task_model.reference_env import reference_site

    try:
        site = reference_site(original)
    except DistributionError as exc:
        pytest.skip(str(exc))
    return {} if site is None else {"PYTHONPATH": str(site)}
