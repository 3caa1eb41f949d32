"""Localization as evidence: after each Verifier pass, where the round's divergence starts.

The harness localizes (`probes.localize`) over one round's evidence and the original's
module graph, and records the result as the property `localization` (kind
`localization`). Its outcome means:

- `violated`: a component of the original is the first divergent one: its probes are
  violated and nothing probed below it is. The record names it (`component`), the
  violated probes behind it (`probes`) and the components cleared below it
  (`established_below`: a differential probe of each agrees with the original). It may
  be a framework function the original calls (`framework`, `called_from`: a probe of it,
  given the same inputs on both sides, diverges); otherwise `framework_calls` lists the
  framework functions the component's own code called in its reference runs.
- `established`: nothing diverges: no violated property of the round names a
  component. Violated properties that name none (an audit finding, a boundary refusal)
  are listed as `unplaced`: they are real, but localization says nothing about them.
- `not_established`: no property of the round names a component, so there is
  nothing to localize on (e.g. only the built-in checks ran).

Each round gets one record, localized over that round's evidence only (every earlier
probe is re-run on the round's candidate first), so the latest record is the current
suspect. Across rounds `change` says how it moved since the previous record: 'first'
(no earlier localization), 'same' (the same component still diverges), 'moved' (a
different one now, `previous` names the old one: the repair worked there and the
divergence now starts elsewhere, or the edit broke something lower), 'resolved' (the
previous suspect no longer diverges and nothing else does), 'appeared' (divergence
where the previous round had none).
"""

from __future__ import annotations

from pathlib import Path

from evidence_store.records import Outcome, ProbeResult
from probes.localize import LOCALIZATION, localize

EXCLUDED_KINDS = frozenset({"localization", "boundary"})
"""Kinds that are not probes of the candidate: the localization itself, boundary refusals."""


def localize_round(
    source: Path,
    results: list[ProbeResult],
    *,
    round: int,
    previous: ProbeResult | None = None,
) -> ProbeResult:
    """The localization record of one round (see the module docstring for its outcomes).

    Args:
        source: the original repository (read into the module graph).
        results: the round's latest result per property.
        round: the round localized.
        previous: the latest localization record of an earlier round, if any.
    """
    probes = [r for r in results if r.property.kind not in EXCLUDED_KINDS]
    placed = [r for r in probes if r.context.get("component")]
    unplaced = sorted(r.property.id for r in probes if r.outcome is Outcome.VIOLATED and not r.context.get("component"))
    found = localize(source, placed) if placed else None
    before = previous.observations.get("component") if previous is not None else None
    observations: dict = {"round": round, "unplaced": unplaced, "previous": before}
    context = {"probe": "probes.round_localization:localize_round", "round": round}
    if found is not None:
        outcome = Outcome.VIOLATED
        observations.update(found)
        change = (
            "first"
            if previous is None
            else "appeared"
            if before is None
            else "same"
            if before == found["component"]
            else "moved"
        )
        context["component"] = found["component"]
    elif placed:
        outcome = Outcome.ESTABLISHED
        cleared = sorted(
            {
                r.context["component"]
                for r in placed
                if r.outcome is Outcome.ESTABLISHED and r.property.kind == "differential"
            }
        )
        observations.update(component=None, established_below=cleared, probes=[])
        observations["message"] = (
            f"no divergent component: none of the {len(placed)} properties naming a component is violated"
            + (f"; agree with the original: {', '.join(cleared)}" if cleared else "")
        )
        change = "first" if previous is None else "resolved" if before else "same"
    else:
        outcome = Outcome.NOT_ESTABLISHED
        observations.update(component=None, established_below=[], probes=[])
        observations["message"] = "nothing to localize on: no property of this round names a component"
        change = "first" if previous is None else "same" if before is None else "resolved"
    observations["change"] = change
    if unplaced:
        observations["message"] += f" (violated without a component: {', '.join(unplaced)})"
    return ProbeResult(property=LOCALIZATION, outcome=outcome, context=context, observations=observations)


def render_localization(record: ProbeResult | None, round: int | None = None) -> str:
    """The localization as the first lines of an evidence block ('' when there is none)."""
    if record is None:
        return ""
    obs = record.observations
    where = f"after round {obs.get('round', round)}"
    if record.outcome is Outcome.VIOLATED:
        head = f"Localization {where}: the divergence starts at {obs['component']} of the original"
        if obs.get("framework"):
            called = f" (called from {', '.join(obs['called_from'])})" if obs.get("called_from") else ""
            head = f"Localization {where}: the divergence starts at {obs['component']}{called}, a framework function"
            head += " the original calls: given the same inputs, its outputs diverge"
        lines = [head, f"  violated probes behind it: {', '.join(obs.get('probes', []))}"]
        if obs.get("established_below"):
            lines.append(f"  agrees with the original below it: {', '.join(obs['established_below'])}")
        others = [c for c in obs.get("candidates", []) if c != obs["component"]]
        if others:
            lines.append(f"  other components with nothing violated below them: {', '.join(others)}")
    else:
        lines = [f"Localization {where}: {obs.get('message', record.outcome.value)}"]
    change = obs.get("change")
    if change == "moved":
        lines.append(f"  since the previous localization: moved from {obs.get('previous')}")
    elif change == "resolved" and obs.get("previous"):
        lines.append(f"  since the previous localization: {obs['previous']} no longer diverges")
    elif change == "same" and obs.get("component"):
        lines.append("  since the previous localization: unchanged")
    if obs.get("framework_calls") and record.outcome is Outcome.VIOLATED:
        lines.append(
            f"  it calls into the framework (its reference run): {', '.join(obs['framework_calls'])}; a probe whose "
            "component is one of them, given the same inputs on both sides, tells whether the divergence is inside it"
        )
    if obs.get("unplaced") and record.outcome is Outcome.VIOLATED:
        lines.append(f"  violated without a component (not localized): {', '.join(obs['unplaced'])}")
    return "\n".join(lines) + "\n\n"
