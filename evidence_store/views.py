"""Views over the latest evidence: transitions between rounds, summaries, per-round tallies.

All functions here are pure: they take `latest` maps (property id -> record, as
`EvidenceStore.latest()` returns them) and build typed values. The text a reader
sees is rendered by `evidence_store.reading`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from pydantic import BaseModel, Field

from evidence_store.records import EvidenceRecord, Outcome

Latest = dict[str, EvidenceRecord]
"""The latest record of every property, by property id."""


class RoundStates(Protocol):
    """What `round_tally` reads: the state after a round (`EvidenceStore.latest`)."""

    def latest(self, *, up_to_round: int | None = None) -> Latest: ...

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
    became_not_established: list[Change] = Field(
        default_factory=list, description="established or violated -> not_established"
    )
    still_established: list[Change] = Field(default_factory=list)
    still_violated: list[Change] = Field(default_factory=list)
    still_not_established: list[Change] = Field(
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
    "became_not_established",
    "still_not_established",
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
    (E, N): "became_not_established",
    (V, N): "became_not_established",
    (E, E): "still_established",
    (V, V): "still_violated",
    (N, N): "still_not_established",
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


NON_CANDIDATE_KINDS = frozenset({"boundary", "unchecked", "localization", "planted", "report", "probe_file"})
"""Kinds of records that say something about the run, not about one property of the
candidate: a role's refused access (`boundary`), what a verification reported it could
not examine (`unchecked`), what a role reported in its own words (`report`), where the
evidence localizes a divergence (`localization`, rendered on its own), a
planted-fault copy of a probe, which examines the probe (`planted`), and a probe file
that loads and runs again, or is removed, after an error of its own (`probe_file`: the
error's id leaves the candidate's properties). They are kept and shown, and never
counted among the candidate's properties."""


def candidate_latest(latest: Mapping[str, EvidenceRecord]) -> Latest:
    """The latest records of the candidate's properties only."""
    return {pid: r for pid, r in latest.items() if r.property.kind not in NON_CANDIDATE_KINDS}


def tally(latest: Mapping[str, EvidenceRecord], *, candidate_only: bool = True) -> Counter[str]:
    """The one count of a state every view shows: candidate properties by latest outcome.

    The live view, `summary.md`, the prompts and `twin evidence show` all count this way
    (properties, not records; the latest outcome of each).

    Args:
        candidate_only: leave out the records about the run (`NON_CANDIDATE_KINDS`).
    """
    counts: Counter[str] = Counter({o.value: 0 for o in Outcome})
    counted = candidate_latest(latest) if candidate_only else latest
    counts.update(Outcome(r.outcome).value for r in counted.values())
    return counts


def round_tally(store: RoundStates, round: int, *, candidate_only: bool) -> Counter[str]:
    """The tally of the state after `round` (each property's latest outcome up to it).

    The loop's evidence score of a round and `summary.md`'s table both count this way.

    Args:
        store: an `EvidenceStore` (anything with `latest(up_to_round=...)`).
        round: the round whose state is counted.
        candidate_only: leave out the records about the run (`NON_CANDIDATE_KINDS`).
    """
    return tally(store.latest(up_to_round=round), candidate_only=candidate_only)


def tally_text(counts: Mapping[str, int]) -> str:
    """`established=11 violated=5 not_established=0`, in that order."""
    return " ".join(f"{o.value}={counts.get(o.value, 0)}" for o in Outcome)
