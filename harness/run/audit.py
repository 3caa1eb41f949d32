"""Reading the run's audit log (written by `ground.boundary.Boundary.audit`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_refusals(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Refusal lines written since byte `offset`; returns them and the new offset.

    A line still being written (no newline yet) is left for the next call.
    """
    if not path.exists():
        return [], offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    complete, _, _ = data.rpartition(b"\n")
    refusals = []
    for line in complete.splitlines():
        try:
            refusals.append(json.loads(line))
        except json.JSONDecodeError:
            refusals.append({"raw": line.decode(errors="replace")})
    return refusals, offset + len(complete) + (1 if complete else 0)
