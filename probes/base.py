"""The probe protocol: a probe is a callable from a context to results.

Probes are made by factories that take options and return a `Probe`, like
scorers: `differential_probe(path, name)`, `imports_check()`, `audit_check()`.
Composing them is a list. A probe never raises for what it finds: a candidate
that crashes, a calling convention that does not fit, a missing file all come
back as results (violated or not_established, with the trace).

Every result's `context["rerun"]` names the factory and its JSON options, so the
evidence store can rebuild the probe and run it again on another candidate.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evidence_store.records import Outcome, ProbeResult, Property

if TYPE_CHECKING:
    from probes.context import ProbeContext

Probe = Callable[["ProbeContext"], list[ProbeResult]]


def rerun_spec(factory: str, **options: Any) -> dict[str, Any]:
    """`context["rerun"]`: the factory (module:name) and the options to call it with."""
    return {"factory": factory, "options": options}


def base_context(ctx: ProbeContext, factory: str, **options: Any) -> dict[str, Any]:
    """What every result records about how it was obtained."""
    import numpy

    return {
        "rerun": rerun_spec(factory, **options),
        "candidate_commit": ctx.candidate_commit,
        "device": ctx.device,
        "precision": ctx.precision,
        "sandbox": ctx.resolved_sandbox_kind,
        "seed": ctx.seed,
        "versions": {"python": platform.python_version(), "numpy": numpy.__version__},
        "python": sys.executable,
    }


def not_established(
    prop: Property, message: str, *, trace: str = "", context: dict | None = None
) -> ProbeResult:
    """A result for a probe that could not tell."""
    return ProbeResult(
        property=prop,
        outcome=Outcome.NOT_ESTABLISHED,
        context=context or {},
        observations={"message": message},
        trace=trace,
    )


def load_factory(spec: str) -> Callable[..., Probe]:
    """Import a factory named 'package.module:name' (as a result's `context["rerun"]` names it).

    Raises:
        ValueError: the spec is malformed, its module or name cannot be loaded, or it is
            not callable.
    """
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"probe factory {spec!r} is not 'package.module:function'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load probe factory {spec!r}: {exc}") from None
    if not callable(factory):
        raise ValueError(f"{spec} is not a probe factory")
    return factory
