"""Views over the latest evidence: transitions between rounds, summaries, a compact text rendering.

All functions here are pure: they take `latest` maps (property id -> record, as
`EvidenceStore.latest()` returns them) and build typed values or text.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from pydantic import BaseModel, Field

from evidence_store.records import EvidenceRecord, Outcome

Latest = dict[str, EvidenceRecord]
"""The latest record of every property, by property id."""

E, V, N = Outcome.ESTABLISHED, Outcome.VIOLATED, Outcome.NOT_ESTABLISHED


class Change(BaseModel):
    """One property's latest record before and after (None: no evidence yet / any more)."""

    property_id: str
    before: EvidenceRecord | None = None
    after: EvidenceRecord | None = None


class Transitions(BaseModel):
    """How each property's latest outcome moved from the state after one round to after another.

    Every property seen in either state is in exactly one list.
    """

    from_round: int
    to_round: int
    regressions: list[Change] = Field(default_factory=list, description="established -> violated")
    fixed: list[Change] = Field(default_factory=list, description="violated -> established")
    newly_established: list[Change] = Field(
        default_factory=list, description="not_established -> established"
    )
    newly_violated: list[Change] = Field(
        default_factory=list, description="not_established -> violated"
    )
    became_unresolved: list[Change] = Field(
        default_factory=list, description="established or violated -> not_established"
    )
    still_established: list[Change] = Field(default_factory=list)
    still_violated: list[Change] = Field(default_factory=list)
    still_unresolved: list[Change] = Field(
        default_factory=list, description="not_established twice"
    )
    new: list[Change] = Field(
        default_factory=list, description="no evidence before, any outcome after"
    )
    gone: list[Change] = Field(default_factory=list, description="evidence before, none after")

    def categories(self) -> dict[str, list[Change]]:
        """Every non-empty category, most urgent first."""
        return {name: changes for name in CATEGORY_ORDER if (changes := getattr(self, name))}


CATEGORY_ORDER = (
    "regressions",
    "newly_violated",
    "still_violated",
    "became_unresolved",
    "still_unresolved",
    "new",
    "gone",
    "fixed",
    "newly_established",
    "still_established",
)

_MOVES: dict[tuple[Outcome, Outcome], str] = {
    (E, V): "regressions",
    (V, E): "fixed",
    (N, E): "newly_established",
    (N, V): "newly_violated",
    (E, N): "became_unresolved",
    (V, N): "became_unresolved",
    (E, E): "still_established",
    (V, V): "still_violated",
    (N, N): "still_unresolved",
}


def transitions(before: Latest, after: Latest, from_round: int, to_round: int) -> Transitions:
    """Classify every property by its outcome in `before` and in `after`."""
    result = Transitions(from_round=from_round, to_round=to_round)
    for pid in sorted(before.keys() | after.keys()):
        old, new = before.get(pid), after.get(pid)
        if old is None:
            name = "new"
        elif new is None:
            name = "gone"
        else:
            name = _MOVES[(Outcome(old.outcome), Outcome(new.outcome))]
        getattr(result, name).append(Change(property_id=pid, before=old, after=new))
    return result


class Summary(BaseModel):
    """Counts of the latest outcome of every property."""

    up_to_round: int | None = Field(description="The state after this round (None: all rounds).")
    properties: int = Field(description="Properties with any evidence.")
    by_outcome: dict[str, int] = Field(description="outcome -> properties (all three present).")
    by_kind: dict[str, dict[str, int]] = Field(description="kind -> outcome -> properties.")
    by_level: dict[int, dict[str, int]] = Field(description="level -> outcome -> properties.")

    @property
    def all_established(self) -> bool:
        """Whether there is evidence and every property's latest outcome is established."""
        return self.properties > 0 and self.by_outcome[E.value] == self.properties


def summarize(latest: Latest, up_to_round: int | None = None) -> Summary:
    """Count latest outcomes per outcome, per kind and per level."""
    counts = Counter(
        (r.property.kind, r.property.level, Outcome(r.outcome).value) for r in latest.values()
    )
    return summarize_counts(((k, lv, o, n) for (k, lv, o), n in counts.items()), up_to_round)


def summarize_counts(
    counts: Iterable[tuple[str, int, str, int]], up_to_round: int | None = None
) -> Summary:
    """Fold (kind, level, outcome, properties) counts into a `Summary`."""
    by_outcome = {o.value: 0 for o in Outcome}
    by_kind: dict[str, Counter[str]] = {}
    by_level: dict[int, Counter[str]] = {}
    for kind, level, outcome, n in counts:
        by_outcome[outcome] += n
        by_kind.setdefault(kind, Counter())[outcome] += n
        by_level.setdefault(level, Counter())[outcome] += n
    return Summary(
        up_to_round=up_to_round,
        properties=sum(by_outcome.values()),
        by_outcome=by_outcome,
        by_kind={k: dict(by_kind[k]) for k in sorted(by_kind)},
        by_level={lv: dict(by_level[lv]) for lv in sorted(by_level)},
    )


DETAIL_CHARS = 160
"""How much of a record's observations or trace one rendered line keeps."""


class Seen(NamedTuple):
    """A property's latest outcome in an earlier state, and the round it came from."""

    outcome: Outcome
    round: int


def render(
    latest: Latest,
    previous: Mapping[str, Seen] | None,
    *,
    max_chars: int,
    round: int | None,
    previous_round: int | None = None,
) -> str:
    """Render the latest evidence as text of at most `max_chars` characters.

    Order: regressions (established in `previous`, violated now), violated, not
    established, established (ids only). Lines are added in that order until the
    next one would not fit; the last line then counts, per section, what was left out.
    """
    problems = {p: r for p, r in latest.items() if r.outcome != E}
    established = sorted(p for p, r in latest.items() if r.outcome == E)
    return render_parts(
        problems,
        established,
        previous,
        max_chars=max_chars,
        round=round,
        previous_round=previous_round,
    )


def render_parts(
    problems: Latest,
    established: Sequence[str],
    previous: Mapping[str, Seen] | None,
    *,
    max_chars: int,
    round: int | None,
    previous_round: int | None = None,
) -> str:
    """`render`, given the latest records that are not established and the ids that are.

    The store calls this directly so that established properties, which render as
    ids only, need no records built. Lines are formatted only when they are reached.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, not {max_chars}")
    ordered = sorted(problems.items())
    before = previous or {}
    regressed = [
        (r, seen)
        for p, r in ordered
        if r.outcome == V and (seen := before.get(p)) is not None and seen.outcome == E
    ]
    regressed_ids = {r.property.id for r, _ in regressed}
    violated = [r for p, r in ordered if r.outcome == V and p not in regressed_ids]
    unresolved = [r for _, r in ordered if r.outcome == N]
    sections: list[tuple[str, int, Iterator[str]]] = [
        ("regressions", len(regressed), (_line("REGRESSED", r, s.round) for r, s in regressed)),
        ("violated", len(violated), (_line("VIOLATED", r) for r in violated)),
        ("not established", len(unresolved), (_line("UNRESOLVED", r) for r in unresolved)),
    ]
    where = "all rounds" if round is None else f"after round {round}"
    since = f" ({len(regressed)} regressed since round {previous_round})" if regressed else ""
    header = (
        f"Evidence {where}: {len(problems) + len(established)} properties; "
        f"{len(established)} established, "
        f"{len(regressed) + len(violated)} violated{since}, {len(unresolved)} not established."
    )
    left = {name: n for name, n, _ in sections} | {"established": len(established)}
    reserve = len(_left_out(left)) + 1
    parts, used = [header], len(header)

    def add(piece: str) -> bool:
        nonlocal used
        if used + len(piece) + reserve > max_chars:
            return False
        parts.append(piece)
        used += len(piece)
        return True

    for name, _, lines in sections:
        for line in lines:
            if not add("\n" + line):
                break
            left[name] -= 1
        if left[name]:
            break
    else:
        if established and add(f"\nEstablished ({len(established)}): {established[0]}"):
            left["established"] -= 1
            for pid in established[1:]:
                if not add(", " + pid):
                    break
                left["established"] -= 1
    if any(left.values()):
        parts.append("\n" + _left_out(left))
    text = "".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _left_out(left: dict[str, int]) -> str:
    parts = ", ".join(f"{n} {name}" for name, n in left.items() if n)
    return f"[{sum(left.values())} more not shown: {parts}]"


def _line(label: str, record: EvidenceRecord, established_in: int | None = None) -> str:
    prop = record.property
    parts = [f"- {label} {prop.id} ({prop.kind}, L{prop.level}, round {record.round}"]
    if record.score is not None:
        parts.append(f", score {record.score:.3g}")
    if established_in is not None:
        parts.append(f", established in round {established_in}")
    parts.append(")")
    detail = _detail(record)
    return "".join(parts) + (f": {detail}" if detail else "")


def _detail(record: EvidenceRecord) -> str:
    """The most telling short text of a record: its trace's last line, else its observations."""
    last_trace_line = next(
        (ln.strip() for ln in reversed(record.trace.splitlines()) if ln.strip()), ""
    )
    if last_trace_line:
        text = last_trace_line
    elif record.observations:
        text = json.dumps(record.observations, separators=(",", ":"), default=str)
    else:
        text = record.property.description
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"
