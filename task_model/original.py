"""`[metadata.twin.original]`: a task's original declared as a pinned distribution of the package index.

Only the declaration lives here; `task_model.distribution` fetches, checks
and lays it out.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ground.terminal import shown

DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A distribution's name as the package index accepts it (PEP 508)."""

LICENSE = re.compile(r"[A-Za-z0-9.+:()-]+( +[A-Za-z0-9.+:()-]+)*")
"""An SPDX expression's characters: identifiers, `AND`/`OR`/`WITH`, parentheses, single spaces."""
MAX_LICENSE = 200
PATH_CHARACTERS = re.compile(r"[^\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")
"""A declared path's characters: none that a terminal or a joined key could read as anything but text."""


class OriginalDistribution(BaseModel):
    """`[metadata.twin.original]`: the task's original, as a pinned distribution of the package index."""

    model_config = ConfigDict(extra="forbid")

    distribution: str = Field(description="The distribution's name on the index, e.g. 'litgpt'.")
    version: str = Field(description="Its exact version, e.g. '0.5.13' (no range).")
    wheel: str = Field(description="The file downloaded, e.g. 'litgpt-0.5.13-py3-none-any.whl'.")
    sha256: str = Field(description="The sha256 of that file; any other file is refused.")
    license: str = Field(description="Its licence (SPDX), as its metadata states it.")
    files: list[str] = Field(
        min_length=1,
        description=(
            "Paths inside the wheel laid out, unmodified, at the same relative paths as the original "
            "(a directory: every file under it)."
        ),
    )
    mount: str | None = Field(
        default=None,
        description=(
            "Published layout only: where the Dockerfile lays the original out (e.g. /app/torch_orig); "
            "twin's own layout mounts it at source_mount."
        ),
    )
    dependencies: bool = Field(
        default=True, description="Whether the reference side needs the distribution's runtime dependencies."
    )

    @field_validator("distribution")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DISTRIBUTION_NAME.fullmatch(value):
            raise ValueError(f"not a distribution name: {value!r}")
        return value

    @field_validator("version")
    @classmethod
    def _exact(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9][A-Za-z0-9.+!-]*", value):
            raise ValueError(f"must be one exact version, not {value!r}")
        return value

    @field_validator("wheel")
    @classmethod
    def _wheel(cls, value: str) -> str:
        if "/" in value or not value.endswith(".whl"):
            raise ValueError(f"must be a wheel's file name, not {value!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError("must be 64 lower-case hex digits")
        return value

    @field_validator("license")
    @classmethod
    def _licence(cls, value: str) -> str:
        if len(value) > MAX_LICENSE or not LICENSE.fullmatch(value):
            raise ValueError(
                f"must be an SPDX licence expression (letters, digits, '.-+:()', AND/OR/WITH, "
                f"at most {MAX_LICENSE} characters), not {shown(value[:80])!r}"
            )
        return value

    @field_validator("files")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for path in value:
            pure = PurePosixPath(path)
            if (
                not path
                or pure.is_absolute()
                or ".." in pure.parts
                or "\\" in path
                or not PATH_CHARACTERS.fullmatch(path)
            ):
                raise ValueError(
                    f"{shown(path)!r} must be a relative path inside the wheel, without control characters"
                )
            key = pure.as_posix()
            if key in seen:
                raise ValueError(f"{shown(path)!r} is declared twice")
            seen.add(key)
        for path in seen:  # a parent declared beside one of its files would select that file twice
            parent = next((str(p) for p in PurePosixPath(path).parents if str(p) in seen), None)
            if parent is not None:
                raise ValueError(f"{shown(path)!r} lies inside {shown(parent)!r}, also declared")
        return value

    @property
    def requirement(self) -> str:
        """`NAME==VERSION`, as pip is asked for it."""
        return f"{self.distribution}=={self.version}"
