"""JSON Lines export and import of a store: one typed object per line.

The first line is a header (`{"type": "header", ...}` with the versions it was
written with); then `round`, `diagnosis` and `evidence` lines. Every line is a
versioned record model dumped as JSON, so a file can be checked line by line
before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, NamedTuple

from pydantic import BaseModel, ValidationError

from evidence_store.records import SCHEMA_VERSION, DiagnosisRecord, EvidenceRecord, RoundInfo
from evidence_store.schema import STORE_VERSION, EvidenceStoreError

FORMAT = "twin-evidence"


class Parsed(NamedTuple):
    """What a JSON Lines file holds, validated."""

    rounds: list[RoundInfo]
    diagnoses: list[DiagnosisRecord]
    records: list[EvidenceRecord]


_TYPES: dict[str, type[BaseModel]] = {
    "round": RoundInfo,
    "diagnosis": DiagnosisRecord,
    "evidence": EvidenceRecord,
}


def write_jsonl(
    out: IO[str],
    *,
    rounds: Iterable[RoundInfo],
    diagnoses: Iterable[DiagnosisRecord],
    records: Iterable[EvidenceRecord],
) -> int:
    """Write a header and every item; return how many diagnoses and records were written."""
    header = {
        "type": "header",
        "format": FORMAT,
        "store_version": STORE_VERSION,
        "record_version": SCHEMA_VERSION,
    }
    out.write(json.dumps(header) + "\n")
    written = 0
    for kind, items in (("round", rounds), ("diagnosis", diagnoses), ("evidence", records)):
        for item in items:
            out.write(json.dumps({"type": kind, **item.model_dump(mode="json")}) + "\n")
            written += kind != "round"
    return written


def read_jsonl(src: IO[str]) -> Parsed:
    """Read and validate a whole file.

    Raises:
        EvidenceStoreError: naming the first bad line: not JSON, unknown type, invalid
            fields, or written with a newer record version.
    """
    parsed = Parsed([], [], [])
    targets = {"round": parsed.rounds, "diagnosis": parsed.diagnoses, "evidence": parsed.records}
    for number, line in enumerate(src, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvidenceStoreError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise EvidenceStoreError(f"line {number}: expected a JSON object")
        kind = obj.pop("type", None)
        version = obj.get("record_version" if kind == "header" else "schema_version", 0)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise EvidenceStoreError(
                f"line {number}: written with record version {version}, newer than the "
                f"{SCHEMA_VERSION} this twin understands"
            )
        if kind == "header":
            if obj.get("format") != FORMAT:
                raise EvidenceStoreError(f"line {number}: not a {FORMAT} export")
            continue
        if kind not in _TYPES:
            raise EvidenceStoreError(f"line {number}: unknown type {kind!r}")
        obj.pop("record_id" if kind == "evidence" else "diagnosis_id", None)
        try:
            targets[kind].append(_TYPES[kind].model_validate(obj))  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise EvidenceStoreError(f"line {number}: {kind} {where}: {first['msg']}") from None
    return parsed
