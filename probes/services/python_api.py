"""Python API differential probes: the same calls on the original and the candidate packages.

Each side imports its own tree (first on `sys.path`); every case is a short list of
calls run in a fresh forked interpreter, so cases cannot leak state into each
other. Results are compared with their types kept (a tuple is not a list, 1 is
not 1.0) and raised exceptions by type (messages too if the comparison says so).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from probes.services.compare import Comparison
from probes.services.matched import Probe, matched_probe


class ApiCall(BaseModel):
    """`module:attr.path(*args, **kwargs)`; an argument `{"$ref": i}` is the result of call i."""

    call: str = Field(description="'module:function' or 'module:Class.method'.")
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


def python_api_probe(
    cases: dict[str, list[ApiCall | dict[str, Any]]],
    comparison: dict[str, Any] | Comparison | None = None,
    *,
    preload: list[str] | None = None,
    **options: Any,
) -> Probe:
    """A probe making each named sequence of calls on both sides and comparing the results."""
    side = {"preload": preload or []}
    built = [
        {
            "name": name,
            "input": {
                "calls": [
                    (ApiCall.model_validate(c) if isinstance(c, dict) else c).model_dump()
                    for c in calls
                ]
            },
        }
        for name, calls in cases.items()
    ]
    return matched_probe(
        "python_api", {"reference": side, "candidate": side}, built, comparison, **options
    )
