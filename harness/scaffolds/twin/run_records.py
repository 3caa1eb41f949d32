"""Evidence records about the run rather than the candidate: the boundary's refusals, what the Verifier
could not examine, and its own summary. Shown to the next Diagnoser, never counted (docs/loop.md)."""

from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome, Property
from roles.schemas import VerifierReport


def refusal_records(run_id: str, t: int, refusals: list[dict]) -> list[EvidenceRecord]:
    """Every refusal the boundary wrote to the audit log, as a violated `boundary:` record."""
    return [
        EvidenceRecord(
            run_id=run_id,
            round=t,
            property=Property(
                id=f"boundary:{r.get('boundary', '?')}:{r.get('action', '?')}",
                kind="boundary",
                description="a role stayed inside its boundary",
            ),
            outcome=Outcome.VIOLATED,
            observations=r,
        )
        for r in refusals
    ]


def unchecked_records(run_id: str, t: int, report: VerifierReport) -> list[EvidenceRecord]:
    """What the Verifier could not examine: not established, with its reason."""
    return [
        EvidenceRecord(
            run_id=run_id,
            round=t,
            property=Property(
                id=f"unchecked:{name}",
                kind="unchecked",
                description=f"the Verifier of round {t} could not examine {name}",
            ),
            outcome=Outcome.NOT_ESTABLISHED,
            observations={"reason": why, "reported_by": "verifier"},
        )
        for name, why in report.unchecked_reasons()
    ]


def report_records(run_id: str, t: int, report: VerifierReport) -> list[EvidenceRecord]:
    """The Verifier's own summary, kept for the next Diagnoser (none when it is empty)."""
    if not report.summary.strip():
        return []
    return [
        EvidenceRecord(
            run_id=run_id,
            round=t,
            property=Property(id="report:verifier", kind="report", description="the Verifier's summary"),
            outcome=Outcome.NOT_ESTABLISHED,
            observations={"summary": report.summary, "reported_by": "verifier"},
        )
    ]
