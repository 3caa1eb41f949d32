"""Service probes in a probe file: matched requests and counterexample searches, stated as data.

A probe file (the Verifier's, or a task's bundled library) may hold a literal dict
`SERVICES`; it is read without executing the file:

```python
SERVICES = {
    "kind": "http",                       # or "process", "python_api"
    "cases": [{"name": "list", "input": {"method": "GET", "target": "/books"}}],
    "spaces": {"catalog": {"methods": ["GET"], "paths": ["/books", "/books/{int}"]}},
    "comparison": {},                     # optional: what may differ (probes.services.compare)
    "sides": {...},                       # optional: how each side starts; default from the task
}
```

`cases` become matched probes (`<kind>:<name>`), `spaces` counterexample searches
(`search:<kind>:<space>`, with the budget given to `service_probes`); a confirmed
counterexample also yields its regression probe (`regression:<kind>:<hash>`), which
the loop re-runs in every later round. How each side starts comes from the task
(`[metadata.twin.services.<kind>]`) or, for HTTP, is inferred (`probes.services.families`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_store.records import Outcome, ProbeResult, Property
from probes.probe_format import ProbeFile, ProbeFileError
from probes.services.families import sides_for
from probes.services.matched import LEVEL, Probe, matched_probe
from probes.services.search import counterexample_probe

KINDS = ("http", "process", "python_api")
KEYS = {"kind", "cases", "spaces", "comparison", "sides", "timeout_s"}


@dataclass(frozen=True)
class SearchBudget:
    """The budget of each counterexample search: inputs generated and seconds (shrinking included)."""

    max_examples: int = 100
    seconds: float = 60.0
    seed: int = 0


def read_services(file: ProbeFile) -> dict[str, Any] | None:
    """The file's `SERVICES` literal (None when it has none), checked for shape.

    Raises:
        ProbeFileError: a `SERVICES` that is not a literal of the documented shape.
    """
    spec = file.literal("SERVICES")
    if spec is not None:
        _check(file.path, spec)
    return spec


def _check(path: Path, spec: Any) -> None:
    if not isinstance(spec, dict):
        raise ProbeFileError(f"{path}: SERVICES must be a dict")
    unknown = set(spec) - KEYS
    if unknown:
        raise ProbeFileError(f"{path}: SERVICES has unknown key(s) {', '.join(sorted(unknown))}")
    if spec.get("kind") not in KINDS:
        raise ProbeFileError(f"{path}: SERVICES['kind'] must be one of {', '.join(KINDS)}")
    cases, spaces = spec.get("cases", []), spec.get("spaces", {})
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "name" in c and "input" in c for c in cases):
        raise ProbeFileError(f"{path}: SERVICES['cases'] must be a list of {{'name': ..., 'input': {{...}}}}")
    if not isinstance(spaces, dict) or not all(isinstance(s, dict) for s in spaces.values()):
        raise ProbeFileError(f"{path}: SERVICES['spaces'] must map space names to dicts")
    if not cases and not spaces:
        raise ProbeFileError(f"{path}: SERVICES states neither cases nor spaces")


def _no_sides(names: list[str], why: str) -> list[ProbeResult]:
    return [
        ProbeResult(
            property=Property(id=name, kind="differential", level=LEVEL),
            outcome=Outcome.NOT_ESTABLISHED,
            observations={"reason": why},
            trace=why,
        )
        for name in names
    ]


def service_probes(path: Path, spec: dict[str, Any], budget: SearchBudget) -> list[Probe]:
    """The matched probe and the counterexample search a `SERVICES` literal states."""
    kind = spec["kind"]
    cases, spaces = spec.get("cases", []), spec.get("spaces", {})
    comparison = spec.get("comparison") or {}
    timeout_s = float(spec.get("timeout_s", 30.0))
    names = [f"{kind}:{c['name']}" for c in cases] + [f"search:{kind}:{s}" for s in spaces]

    def probe(ctx) -> list[ProbeResult]:
        sides, why = (spec["sides"], "") if spec.get("sides") else sides_for(ctx, kind)
        if sides is None:
            return _no_sides(names, f"{path.name}: {why}")
        results: list[ProbeResult] = []
        if cases:
            results += matched_probe(kind, sides, cases, comparison, timeout_s=timeout_s)(ctx)
        if spaces:
            search = counterexample_probe(
                kind,
                sides,
                spaces,
                comparison,
                max_examples=budget.max_examples,
                seconds=budget.seconds,
                seed=budget.seed,
                timeout_s=timeout_s,
            )
            results += search(ctx)
        return results

    return [probe]
