"""`[metadata.twin.original]`: a task's original declared as a pinned distribution of the package index.

Only the declaration lives here; `task_model.distribution` fetches, checks
and lays it out.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator


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
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", value):
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

    @field_validator("files")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for path in value:
            pure = PurePosixPath(path)
            if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
                raise ValueError(f"{path!r} must be a relative path inside the wheel")
        return value

    @property
    def requirement(self) -> str:
        """`NAME==VERSION`, as pip is asked for it."""
        return f"{self.distribution}=={self.version}"
