"""Evidence rendered for a reader: one block per property, never cut inside a record.

A block names the property's outcome, kind, level and one-line description. A
violated differential property lists every failing output (the first
`FAILING_SHOWN`) as `name: measure distance D > tolerance T (noise N)`, the number
that decided it, and counts the outputs that pass. Other properties that did not
hold say why in one line (the check's message, or the last line of its trace).

`render()` puts blocks in priority order (regressions, new violations, other
violations, not established, then established ids) and adds them whole while they
fit the budget; what does not fit is dropped whole, lowest priority first, and
counted. Budgets count every measurement at a fixed width and numbers are rendered
in the one format of `evidence_store.numbers`, so which blocks fit, and the text
itself, are the same on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from evidence_store import numbers
from evidence_store.records import EvidenceRecord, Outcome
from evidence_store.reimplementation import REIMPLEMENTED, outcome_text, reimplementation_line  # noqa: F401 - read from here too

E, V, N = Outcome.ESTABLISHED, Outcome.VIOLATED, Outcome.NOT_ESTABLISHED

FAILING_SHOWN = 5
"""Failing outputs (or findings) listed per property; the rest are counted."""
TEXT_CHARS = 220
"""Budget of one free-text field (a description, a message, a trace line)."""
IDS_SHOWN = 8
"""Property ids listed per kind of change in the 'since round' line; the rest are counted."""
OWN_FAILING_SHOWN = 40
"""Failing outputs listed in a probe's own result (`margins`), each in full; the rest are counted."""
CLOSEST_SHOWN = 3
"""Passing outputs listed in a probe's own result: those closest to their tolerance; the rest are counted."""


class Seen(NamedTuple):
    """A property's latest outcome in an earlier state, and the round it came from."""

    outcome: Outcome
    round: int


ZERO_NOISE = {"float64": "unrounded", "rerun": "deterministic", "reseed": "seed-independent"}
"""Why a noise is 0, in a word, by where it was measured (a record's `observations["noise_source"]`): the
original's float64 run gave the very same values, its second run did, its run with another seed did; a record
that does not say where gets `identical`."""
UNMEASURED = "unmeasured"
"""The word of a noise that is 0 because the second run had no such output."""


# ---- one property --------------------------------------------------------------------------------
def noise_text(output: Mapping[str, Any], noise_source: str | None) -> str:
    """An output's noise; a zero one says why in a word (`ZERO_NOISE`), so it never reads as a measurement
    that came out 0 by rounding."""
    value = float(output.get("noise", 0.0))
    if value != 0.0:
        return numbers.noise(value)
    why = UNMEASURED if output.get("noise_measured") is False else ZERO_NOISE.get(noise_source or "", "identical")
    return f"{numbers.noise(value)}, {why}"


def output_line(name: str, output: Mapping[str, Any], noise_source: str | None = None) -> str:
    """One compared output, with the number that decides it against its tolerance.

    Args:
        noise_source: where the record's noise was measured (`float64`, `rerun`, `reseed`).
    """
    measure = str(output.get("measure", "?"))
    score = float(output.get("score", 0.0))
    tolerance = float(output.get("tolerance", 0.0))
    if measure == "banded":
        verdict = "inside" if output.get("ok") else "outside"
        similarity = numbers.short_of_one(numbers.score(score), score)
        if output.get("difference") is None:  # recorded before the difference was kept
            return f"{name}: banded, {verdict} the band {numbers.tolerance(tolerance)} (similarity {similarity})"
        difference = numbers.tolerance(float(output["difference"]))
        return (
            f"{name}: banded, largest difference {difference} {verdict} the band {numbers.tolerance(tolerance)} "
            f"(similarity {similarity})"
        )
    sign = "<=" if output.get("ok") else ">"
    text = (
        f"{name}: {measure} distance {numbers.distance(1.0 - score)} {sign} tolerance "
        f"{numbers.tolerance(tolerance)} (noise {noise_text(output, noise_source)})"
    )
    return text if output.get("informative", True) else text + ", uninformative"


def tolerance_share(output: Mapping[str, Any]) -> float | None:
    """How much of its tolerance an output's distance uses (1.0 at the edge); None for a banded output."""
    if output.get("measure") == "banded":
        return None
    distance = 1.0 - float(output.get("score", 0.0))
    tolerance = float(output.get("tolerance", 0.0))
    if tolerance > 0:
        return distance / tolerance
    return 0.0 if distance <= 0 else float("inf")


def closest_passing(record: EvidenceRecord) -> list[tuple[str, Mapping[str, Any]]]:
    """The passing outputs, those that use the most of their tolerance first (banded ones last)."""
    passing = passing_outputs(record)
    return sorted(passing, key=lambda item: -(tolerance_share(item[1]) or 0.0))


def passing_outputs(record: EvidenceRecord) -> list[tuple[str, Mapping[str, Any]]]:
    """The compared outputs that pass, by name, in the probe's order."""
    outputs = record.observations.get("outputs")
    if not isinstance(outputs, Mapping):
        return []
    return [(str(n), o) for n, o in outputs.items() if isinstance(o, Mapping) and o.get("ok", True)]


def failing_lines(record: EvidenceRecord) -> tuple[list[str], int, int]:
    """(failing outputs, structural mismatches and findings as lines; how many pass; how many fail)."""
    obs = record.observations
    lines = [f"structure: {numbers.clip_words(str(s), TEXT_CHARS)}" for s in obs.get("structure") or []]
    outputs = obs.get("outputs")
    passing = len(passing_outputs(record))
    if isinstance(outputs, Mapping):
        for name, output in outputs.items():
            if isinstance(output, Mapping) and not output.get("ok", True):
                lines.append(output_line(str(name), output, record.observations.get("noise_source")))
    for imported in obs.get("forbidden_imports") or []:
        if isinstance(imported, Mapping):
            where = imported.get("importer") or {}
            lines.append(f"forbidden import {imported.get('module')} at {where.get('file')}:{where.get('line')}")
    for finding in obs.get("findings") or []:
        if isinstance(finding, Mapping):
            text = f"{finding.get('file')}:{finding.get('line')} {finding.get('detail', '')}"
            lines.append(numbers.clip_words(text, TEXT_CHARS))
    return lines, passing, len(lines)


def reason(record: EvidenceRecord) -> str:
    """Why a property did not hold, in one line: its message, else its trace's last line."""
    message = str(record.observations.get("message") or record.observations.get("reason") or "")
    last_trace_line = next((ln for ln in reversed(record.trace.splitlines()) if ln.strip()), "")
    text = " — ".join(t.strip() for t in (message, last_trace_line) if t.strip())
    return numbers.clip_words(text, TEXT_CHARS) if text else ""


def property_block(record: EvidenceRecord, label: str, *, note: str = "", margins: bool = False) -> str:
    """A property's lines: header, failing outputs (bounded), the passing ones, reason.

    Beside failing outputs the passing ones are named (the first `IDS_SHOWN`, the rest
    counted). With `margins` (a probe's own result, read by its author) up to
    `OWN_FAILING_SHOWN` failing outputs are listed, and the passing ones are counted
    with the `CLOSEST_SHOWN` closest to their tolerance, each with its distance against
    its tolerance and the share of it used; the rest are counted.
    """
    prop = record.property
    description = numbers.clip_words(prop.description, TEXT_CHARS) if prop.description else ""
    head = f"- {label} {prop.id} ({prop.kind}, L{prop.level}{note})" + (f": {description}" if description else "")
    lines = [head]
    failing, passing, total = failing_lines(record)
    shown = OWN_FAILING_SHOWN if margins else FAILING_SHOWN
    lines += [f"    {line}" for line in failing[:shown]]
    if total > shown:
        lines.append(f"    … {total - shown} more failing (not listed)")
    if margins and passing:
        lines += _margins(record, passing)
    elif passing and failing:
        names = [name for name, _ in passing_outputs(record)]
        more = f" and {len(names) - IDS_SHOWN} more" if len(names) > IDS_SHOWN else ""
        plural = "s" if passing != 1 else ""
        listed = numbers.clip_words(", ".join(names[:IDS_SHOWN]), TEXT_CHARS)
        lines.append(f"    {passing} other output{plural} pass: {listed}{more}")
    elif passing:
        plural = "s" if passing != 1 else ""
        lines.append(
            f"    {passing} other output{plural} pass"
            if failing
            else f"    {'all ' if passing > 1 else ''}{passing} output{plural} pass"
        )
    why = reason(record)
    if why and (record.outcome is not E) and not (failing and record.observations.get("outputs")):
        lines.append(f"    why: {why}")
    if record.reimplemented:
        lines.append(f"    {reimplementation_line(record)}")
    return "\n".join(lines)


def _margins(record: EvidenceRecord, passing: int) -> list[str]:
    """A probe's passing outputs for its author: how many, and the few closest to their tolerance."""
    closest = closest_passing(record)[:CLOSEST_SHOWN]
    plural = "s" if passing != 1 else ""
    lines = [f"    {passing} output{plural} pass" + ("; closest to their tolerance:" if passing > 1 else ":")]
    for name, output in closest:
        share = tolerance_share(output)
        used = f", {numbers.significant(share, 2)} of its tolerance" if share is not None else ""
        lines.append(f"      {output_line(name, output, record.observations.get('noise_source'))}{used}")
    if passing > len(closest):
        lines.append(f"      … {passing - len(closest)} more passing (not listed)")
    return lines


# ---- a whole state --------------------------------------------------------------------------------
class Changes(NamedTuple):
    """How the latest outcomes moved since an earlier state, by property id."""

    regressed: list[str]
    newly_violated: list[str]
    newly_not_established: list[str]
    fixed: list[str]
    newly_established: list[str]

    def line(self, since_round: int) -> str:
        parts = [
            _ids_part(name, ids)
            for name, ids in (
                ("regressed (established before, violated now)", self.regressed),
                ("newly violated", self.newly_violated),
                ("not established now (established or violated before)", self.newly_not_established),
                ("fixed (violated before, established now)", self.fixed),
                ("newly established", self.newly_established),
            )
            if ids
        ]
        return f"Since round {since_round}: " + ("; ".join(parts) if parts else "no outcome changed") + "."


def _ids_part(name: str, ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:IDS_SHOWN]) + (f", +{len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else "")
    return f"{len(ids)} {name}: {shown}"


def changes(outcomes: Mapping[str, Outcome], previous: Mapping[str, Seen]) -> Changes:
    """Compare latest outcomes with an earlier state's."""
    found = Changes([], [], [], [], [])
    for pid in sorted(outcomes):
        now, before = outcomes[pid], previous.get(pid)
        was = before.outcome if before is not None else None
        if now is V and was is E:
            found.regressed.append(pid)
        elif now is V and was is not V:
            found.newly_violated.append(pid)
        elif now is N and was in (E, V):
            found.newly_not_established.append(pid)
        elif now is E and was is V:
            found.fixed.append(pid)
        elif now is E and was is not E:
            found.newly_established.append(pid)
    return found


def render(
    problems: Mapping[str, EvidenceRecord],
    established: Sequence[str],
    previous: Mapping[str, Seen] | None,
    *,
    max_chars: int,
    round: int | None,
    previous_round: int | None = None,
    commit: str | None = None,
) -> str:
    """The evidence of one state as text of at most `max_chars` characters.

    Args:
        problems: latest records of the properties that are not established.
        established: ids of the properties whose latest outcome is established.
        previous: outcomes in the earlier state changes are measured against (None: none).
        round: the state after this round (None: all rounds).
        previous_round: the round `previous` is the state after.
        commit: the candidate commit the state's evidence was taken on.
    """
    seen = {pid: Seen(Outcome(r.outcome), r.round) for pid, r in problems.items()}
    return render_seen(
        seen,
        problems.__getitem__,
        established,
        previous,
        max_chars=max_chars,
        round=round,
        previous_round=previous_round,
        commit=commit,
    )


def render_seen(
    problems: Mapping[str, Seen],
    record_of: Callable[[str], EvidenceRecord],
    established: Sequence[str],
    previous: Mapping[str, Seen] | None,
    *,
    max_chars: int,
    round: int | None,
    previous_round: int | None = None,
    commit: str | None = None,
    reimplemented: Sequence[str] = (),
) -> str:
    """`render()` from the outcomes of the properties that are not established.

    A record is asked of `record_of(pid)` only for a block that is rendered: most of a large
    state is counted, not shown, and need not be read whole.

    Args:
        reimplemented: established ids whose reference never ran a component the probe names: each
            gets a block after the problems' (`record_of` gives their records too), labelled
            `NOT YET ESTABLISHED` where a component on the task's interface is among them.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, not {max_chars}")
    outcomes = {pid: seen.outcome for pid, seen in problems.items()} | {pid: E for pid in established}
    moved = changes(outcomes, previous or {})
    regressed = set(moved.regressed)
    new = set(moved.newly_violated) if previous is not None else set()  # no earlier state: nothing is new
    violated = sorted(p for p, r in problems.items() if r.outcome is V)
    ordered = (
        [(p, "REGRESSED") for p in violated if p in regressed]
        + [(p, "VIOLATED (new)") for p in violated if p in new]
        + [(p, "VIOLATED") for p in violated if p not in regressed | new]
        + [(p, "NOT ESTABLISHED") for p in sorted(problems) if problems[p].outcome is N]
    )
    n_violated = len(violated)
    where = "all rounds" if round is None else f"after round {round}"
    on = f" on candidate {numbers.commit(commit)}" if commit else ""
    header = [
        f"Evidence {where}{on}: {len(outcomes)} properties (latest outcome of each); "
        f"{len(established)} established, {n_violated} violated, {len(outcomes) - len(established) - n_violated} "
        "not established."
    ]
    if previous_round is not None and previous is not None:
        header.append(moved.line(previous_round))
    if reimplemented:
        header.append(
            f"{len(reimplemented)} of the established were compared only against a re-implementation "
            "(the probe's reference never ran a component it names): shown below; those whose component is "
            "on the task's interface are NOT YET ESTABLISHED."
        )
    parts = header[:]
    left = {"violated": n_violated, "not established": len(outcomes) - len(established) - n_violated}
    left["established"] = len(established)
    reserve = numbers.budget_length(_left_out({k: len(outcomes) for k in left})) + 1
    used = sum(numbers.budget_length(p) + 1 for p in parts)

    ordered += [(p, "") for p in reimplemented]
    dropping = False
    for pid, label in ordered:
        record = record_of(pid)
        seen = problems.get(pid) or Seen(E, record.round)
        note = f", round {seen.round}" if round is not None and seen.round != round else ""
        if not label:
            label = f"{'NOT YET ' if record.open_on_interface else ''}ESTABLISHED ({REIMPLEMENTED})"
        block = property_block(record, label, note=note)
        length = numbers.budget_length(block)
        if used + length + 1 + reserve > max_chars:
            dropping = True  # this block and every one after it are dropped whole, and counted
            break
        parts.append(block)
        used += length + 1
        left["violated" if seen.outcome is V else "not established" if seen.outcome is N else "established"] -= 1
    plain = [pid for pid in established if pid not in set(reimplemented)]
    if plain and not dropping:
        shown: list[str] = []
        line_length = numbers.budget_length(f"Established ({len(plain)}): ")
        for pid in plain:
            line_length += numbers.budget_length(pid) + (2 if shown else 0)
            if used + line_length + 1 + reserve > max_chars:
                break
            shown.append(pid)
        left["established"] -= len(shown)
        if shown:
            parts.append(f"Established ({len(plain)}): " + ", ".join(shown))
    if any(left.values()):
        parts.append(_left_out(left))
    text = "\n".join(parts)
    if len(text) > max_chars:  # a budget too small even for the header
        text = numbers.clip_words(text, max_chars - 2)[:max_chars]
    return text


def _left_out(left: Mapping[str, int]) -> str:
    counts = ", ".join(f"{n} {name}" for name, n in left.items() if n)
    return f"[{sum(left.values())} properties not shown for lack of room: {counts}]"
