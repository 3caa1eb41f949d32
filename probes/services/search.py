"""Counterexample search: property-based inputs against both sides, shrunk and re-run.

Following the rule that a difference counts only if it runs: `hypothesis` draws
inputs from a declared space and sends each to the original and the candidate;
the first input whose answers differ under the probe's comparison is shrunk to a
minimal reproducer, which must then differ again on three more runs while the
original agrees with itself each time. A confirmed reproducer becomes a
regression probe (see `regression`), which is established once the difference is gone.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from evidence_store.records import Outcome, ProbeResult, Property
from probes.services.compare import Comparison, ProbeCannotTell, differences
from probes.services.matched import LEVEL, Probe, rerun_spec, start_failure
from probes.services.regression import regression_result
from probes.services.session import DifferentialSession, SessionError
from probes.services.strategies import strategy_for

REPRODUCTIONS = 3


@dataclass
class Budget:
    """The fixed budget of one search: generated inputs and wall time (shrinking included)."""

    max_examples: int = 200
    seconds: float = 120.0


@dataclass
class SearchOutcome:
    """What one search found."""

    found: bool
    input: dict[str, Any] | None = None
    differences: list[str] = field(default_factory=list)
    size: int = 0
    evaluations: int = 0
    seconds: float = 0.0
    reproduced: int = 0
    reproductions: list[list[str]] = field(default_factory=list)
    """The differences seen on each of the three re-runs of the shrunk input (empty: it agreed)."""
    reference_stable: bool = True
    cannot_tell: int = 0
    out_of_time: bool = False

    @property
    def confirmed(self) -> bool:
        return self.found and self.reproduced == REPRODUCTIONS and self.reference_stable


def input_size(value: dict[str, Any]) -> int:
    """Size of a reproducer: characters of its canonical JSON form (smaller reads faster)."""
    return len(json.dumps(value, sort_keys=True, separators=(",", ":")))


def search_counterexample(
    session: DifferentialSession,
    kind: str,
    space: dict[str, Any],
    comparison: Comparison,
    budget: Budget,
    *,
    seed: int = 0,
) -> SearchOutcome:
    """Search `space` for an input on which the two sides differ; shrink and confirm it."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import Flaky, NoSuchExample

    strategy = strategy_for(kind, space)
    start = time.monotonic()
    stats: dict[str, Any] = {"evaluations": 0, "cannot_tell": 0, "out_of_time": False, "smallest": None}

    def differs(value: dict[str, Any]) -> bool:
        if time.monotonic() - start > budget.seconds:
            stats["out_of_time"] = True
            return False
        stats["evaluations"] += 1
        try:
            reference, candidate = session.observe(value)
            found = bool(differences(comparison, reference, candidate))
        except ProbeCannotTell:
            stats["cannot_tell"] += 1
            return False
        if found and (stats["smallest"] is None or input_size(value) < input_size(stats["smallest"])):
            stats["smallest"] = value
        return found

    config = settings(
        max_examples=budget.max_examples,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    try:
        minimal = find(strategy, differs, settings=config, random=random.Random(seed))
    except NoSuchExample:
        minimal = None
    except Flaky:
        # A difference that did not recur when hypothesis replayed it (or the budget ran
        # out meanwhile): keep the smallest one seen; the reproductions below decide.
        minimal = stats["smallest"]
    if minimal is None:
        return SearchOutcome(
            found=False,
            evaluations=stats["evaluations"],
            seconds=time.monotonic() - start,
            cannot_tell=stats["cannot_tell"],
            out_of_time=stats["out_of_time"],
        )
    outcome = SearchOutcome(
        found=True,
        input=minimal,
        size=input_size(minimal),
        evaluations=stats["evaluations"],
        cannot_tell=stats["cannot_tell"],
        out_of_time=stats["out_of_time"],
    )
    first_reference = None
    for _ in range(REPRODUCTIONS):
        reference, candidate = session.observe(minimal)
        try:
            diffs = differences(comparison, reference, candidate)
            if first_reference is not None and differences(comparison, first_reference, reference):
                outcome.reference_stable = False
        except ProbeCannotTell:
            outcome.reference_stable = False
            continue
        first_reference = first_reference or reference
        outcome.reproductions.append(diffs[:5])
        if diffs:
            outcome.reproduced += 1
            outcome.differences = diffs
    outcome.seconds = time.monotonic() - start
    return outcome


def counterexample_probe(
    kind: str,
    sides: dict[str, dict[str, Any]],
    spaces: dict[str, dict[str, Any]],
    comparison: dict[str, Any] | None = None,
    *,
    max_examples: int = 200,
    seconds: float = 120.0,
    seed: int = 0,
    timeout_s: float = 30.0,
) -> Probe:
    """A probe searching each named space for a counterexample, with a fixed budget per space.

    Returns:
        `probe(ctx) -> list[ProbeResult]`: per space, `search:<kind>:<name>` (violated when a
        confirmed counterexample was found, established when none was within the budget,
        not_established when one was found but did not reproduce or the original was not
        stable); and per confirmed counterexample a `regression:<kind>:<hash>` result whose
        rerun replays the minimal input.
    """
    cmp = Comparison.model_validate({"kind": kind, **(comparison or {})})
    if cmp.kind != kind:
        raise ValueError(f"a {cmp.kind} comparison cannot judge a {kind} search")
    budget = Budget(max_examples=max_examples, seconds=seconds)
    options = {
        "kind": kind,
        "sides": sides,
        "spaces": spaces,
        "comparison": comparison or {},
        "max_examples": max_examples,
        "seconds": seconds,
        "seed": seed,
        "timeout_s": timeout_s,
    }

    def probe(ctx) -> list[ProbeResult]:
        results = []
        try:
            # the session lives through every space's budget, the reproductions and the start
            lifetime = 120.0 + len(spaces) * (seconds + (REPRODUCTIONS + 2) * 2 * timeout_s)
            session = DifferentialSession(ctx, kind, sides, timeout_s=timeout_s, lifetime_s=lifetime).__enter__()
        except SessionError as exc:
            return [start_failure(_search_property(kind, name), exc) for name in spaces]
        try:
            for name, space in spaces.items():
                context = {
                    "probe": f"search:{kind}",
                    "space": space,
                    "budget": budget.__dict__,
                    "seed": seed,
                    "comparison": cmp.model_dump(),
                    "comparison_digest": cmp.digest(),
                    "rerun": rerun_spec(ctx, "probes.services.search:factory", {**options, "spaces": {name: space}}),
                }
                try:
                    found = search_counterexample(session, kind, space, cmp, budget, seed=seed)
                except SessionError as exc:
                    results.append(
                        ProbeResult(
                            property=_search_property(kind, name),
                            outcome=Outcome.NOT_ESTABLISHED,
                            context=context,
                            observations={"reason": str(exc)},
                            trace=traceback.format_exc(),
                        )
                    )
                    continue
                results.extend(_results(ctx, kind, name, sides, cmp, found, context, session))
        finally:
            session.close()
        return results

    return probe


def _search_property(kind: str, name: str) -> Property:
    return Property(
        id=f"search:{kind}:{name}",
        kind="counterexample_search",
        level=LEVEL,
        description=f"no input drawn from space {name!r} makes the candidate answer differently",
    )


def _results(ctx, kind, name, sides, cmp, found: SearchOutcome, context, session) -> list[ProbeResult]:
    observations = {k: v for k, v in found.__dict__.items()}
    prop = _search_property(kind, name)
    if not found.found:
        return [
            ProbeResult(
                property=prop,
                outcome=Outcome.ESTABLISHED,
                score=1.0,
                context=context,
                observations=observations,
            )
        ]
    if not found.confirmed:
        return [
            ProbeResult(
                property=prop,
                outcome=Outcome.NOT_ESTABLISHED,
                context=context,
                observations=observations,
                trace="a difference was found but did not reproduce three times on a stable original",
            )
        ]
    reference, candidate = session.observe(found.input)
    regression = regression_result(
        ctx,
        kind,
        sides,
        found.input,
        cmp,
        reference,
        candidate,
        found_by=prop.id,
        reproduced=found.reproduced,
    )
    observations["regression"] = regression.property.id
    observations["message"] = (
        f"counterexample, shrunk to {found.size} characters and reproduced {found.reproduced}/{REPRODUCTIONS}: "
        f"{json.dumps(found.input, sort_keys=True)[:600]}; differs in: {'; '.join(found.differences[:3])[:900]}"
    )
    return [
        ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            context=context,
            observations=observations,
        ),
        regression,
    ]


def factory(**options: Any) -> Probe:
    """Rerun entry point: the same search again (same space, budget and seed)."""
    return counterexample_probe(**options)
