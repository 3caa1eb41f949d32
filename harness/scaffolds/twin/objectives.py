"""Whether a diagnosis's objectives are shown done by the evidence.

An objective is done when every property id its gap names (in its evidence or its
probes) is established; it is open while one of them is not, or while it names none
the evidence holds, since then nothing could show it done. The Diagnoser reads these
statuses for the previous round's objectives. The loop asks more before it calls no
Verifier (`all_shown`): that every entry of every gap names a property established by
the round's re-run of the earlier probes.
"""

from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome
from roles.schemas import Diagnosis, Gap

ID_ENDS = frozenset(" \t:;,(—–")
"""What may follow a property id when a role writes a description after it (`a.b — what it checks`)."""


def holds(record: EvidenceRecord) -> bool:
    """Established, and not only against a re-implementation of a component on the task's interface."""
    return record.outcome is Outcome.ESTABLISHED and not record.open_on_interface


def objective_statuses(diagnosis: Diagnosis, latest: dict[str, EvidenceRecord]) -> list[tuple[str, str]]:
    """Each gap of `diagnosis` as ('title: objective', 'open: why'), or as ('title', 'done') once
    `latest` (property id → its latest record) shows it done."""
    marked = []
    for gap in diagnosis.gaps:
        entries = [*gap.evidence, *gap.probes]
        named = [pid for pid in dict.fromkeys(property_id_in(e, latest) for e in entries) if pid]
        left = [pid for pid in named if not holds(latest[pid])]
        copied = [pid for pid in left if latest[pid].outcome is Outcome.ESTABLISHED]
        if not named:
            status = "open: it names no property with evidence, so nothing shows it done"
        elif copied and copied == left:
            status = f"open: {', '.join(copied)} established only against a re-implementation (not yet established)"
        else:
            status = f"open: {', '.join(left)} not established" if left else "done"
        # a done objective is named by its title alone: its whole text again would only cost tokens
        marked.append((gap.title if status == "done" else f"{gap.title}: {gap.objective}", status))
    return marked


def all_shown(diagnosis: Diagnosis, latest: dict[str, EvidenceRecord]) -> bool:
    """The diagnosis has gaps, and every entry of every gap (its evidence and its probes) names
    a property that `latest` holds established. An entry naming nothing known (a file:line, a
    probe asked for in words, a property no probe states yet) asks for a Verifier."""
    if not diagnosis.gaps:
        return False
    for gap in diagnosis.gaps:
        entries = [*gap.evidence, *gap.probes]
        named = [property_id_in(entry, latest) for entry in entries]
        if not entries or any(pid is None or not holds(latest[pid]) for pid in named):
            return False
    return True


def property_id_in(entry: str, known: dict) -> str | None:
    """The known property id that `entry` names: the entry itself, or the longest known id it
    starts with followed by a separator and a description; None when it names none."""
    entry = entry.strip()
    if entry in known:
        return entry
    found = [pid for pid in known if entry.startswith(pid) and entry[len(pid)] in ID_ENDS]
    return max(found, key=len, default=None)


def evidence_diagnosis(latest: dict[str, EvidenceRecord]) -> Diagnosis:
    """A diagnosis derived from the evidence where no Diagnoser gave one: a gap per property that does not
    hold (`holds`; its id as evidence and as what to verify), or, before any evidence, the whole migration."""
    gaps = [
        Gap(
            title=f"{record.property.id} is {record.outcome.value}",
            evidence=[record.property.id],
            objective=f"make {record.property.description or record.property.id} hold",
            probes=[record.property.id],
        )
        for record in latest.values()
        if not holds(record)
    ]
    summary = "No diagnosis was produced; these gaps come from the evidence."
    if not latest:
        summary = "Nothing has been verified yet: migrate the whole repository."
        gaps = [Gap(title="migrate the repository", objective="follow the task instruction")]
    return Diagnosis(summary=summary, gaps=gaps[:20])
