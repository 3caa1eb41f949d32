"""The re-implementation mark's words: an outcome qualified where the probe's compared output did not come
from the component it names, and the one line that says why (`ReferenceRun.reason`)."""

from __future__ import annotations

from evidence_store import numbers
from evidence_store.records import EvidenceRecord, Outcome

NAMES_CHARS = 220
"""Budget of the names a line lists (as every free-text field of `evidence_store.reading`)."""


REIMPLEMENTED = "against a re-implementation"
"""What an outcome is qualified with when the probe's compared output did not come from the component it
names (its reference never ran it, its outputs stayed the same without it, or its record is not known)."""


def outcome_text(record: EvidenceRecord) -> str:
    """A record's outcome as every view shows it: `established (against a re-implementation)` where its
    compared output did not come from the component the probe names (`ProbeResult.reimplemented`)."""
    outcome = Outcome(record.outcome).value
    return f"{outcome} ({REIMPLEMENTED})" if record.reimplemented else outcome


_WHY = {
    "unchanged": "the reference's outputs stayed the same when {names} gave other values or did nothing: the probe "
    "compared against its own re-implementation",
    "trace disturbed": "the probe removed or replaced the hook that records what its reference ran of {names}: not "
    "known whether the original's code gave the output",
    "trace missing": "the reference's run left no record of what it ran of {names}: not known whether the "
    "original's code gave the output",
}
_NEVER_RAN = "the reference never ran {names}: the probe compared against its own re-implementation"


def reimplementation_line(record: EvidenceRecord) -> str:
    """Why the compared output did not come from what the probe names, in one line ('' where it did)."""
    missing = record.reimplemented
    if not missing:
        return ""
    names = numbers.clip_words(", ".join(missing), NAMES_CHARS)
    line = _WHY.get(record.reference_run.reason if record.reference_run else "", _NEVER_RAN).format(names=names)
    interface = numbers.clip_words(", ".join(record.open_on_interface), NAMES_CHARS)
    return line + (f"; on the task's interface: {interface}" if interface else "")
