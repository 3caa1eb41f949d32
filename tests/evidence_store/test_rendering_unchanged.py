"""The prompt rendering of a fixed store is byte for byte the text recorded in `data/`.

Recorded trajectories (`examples/*/*.jsonl`) replay against the exact prompt text, so
a change that makes `render_for_prompt()` faster must not change one character of it.
The fixture covers every kind of block (failing, banded and uninformative outputs,
structure, forbidden imports, findings, reasons from messages and traces, clipped
long text), changes between rounds, non-candidate kinds, and budgets from one that
holds only the header to one that holds everything. Rewrite the expected file only
for a deliberate change of the text (`TWIN_REWRITE_RENDER_FIXTURE=1`), and re-record
the examples with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.store import EvidenceStore

EXPECTED = Path(__file__).parent / "data" / "render_for_prompt.txt"
BUDGETS = (60, 400, 1500, 4000, 12000, 200_000)
OUTCOMES = (Outcome.VIOLATED, Outcome.ESTABLISHED, Outcome.NOT_ESTABLISHED)
LONG = "the normalised outputs of the layer agree with the reference within its noise floor " * 4


def _observations(p: int, round: int) -> dict[str, object]:
    """Observations whose shape cycles through every block a reader may see."""
    shape = p % 6
    if shape == 0:
        outputs = {
            f"out_{i}": {
                "measure": ("tensor", "scalar", "distributional")[i % 3],
                "score": 1.0 - (i + 1) * 10.0 ** -(p % 7 + 1),
                "tolerance": 1.5e-5 * (i + 1),
                "noise": 1.5e-6 * (i + 1),
                "ok": (i + p + round) % 3 != 0,
                "informative": i % 4 != 1,
            }
            for i in range(p % 23 + 1)
        }
        outputs["band"] = {"measure": "banded", "score": 0.97, "tolerance": 0.05, "ok": (p // 6 + round) % 2 == 0}
        return {"outputs": outputs, "noise_floor": 1e-6}
    if shape == 1:
        return {
            "structure": [f"shape of out_{i} is [2, {i + 3}] in the reference, [2, {i}] here" for i in range(p % 4)]
        }
    if shape == 2:
        return {
            "forbidden_imports": [{"module": "torch", "importer": {"file": f"model_{p}.py", "line": p}}],
            "findings": [{"file": "train.py", "line": 7, "detail": LONG}],
        }
    if shape == 3:
        return {"message": f"entry point train_step(params, batch) raised after {p}.5 s: nan loss " + LONG}
    if shape == 4:
        return {"reason": "the probe assumed a calling convention the candidate does not use"}
    return {}


def _records(round: int, properties: int) -> list[EvidenceRecord]:
    found = []
    for p in range(properties):
        if (p + round) % 5 == 4 and round > 1:
            continue  # not every property is examined in every round
        kind = ("differential", "jit", "imports", "audit")[p % 4]
        if p % 17 == 16:
            kind = ("boundary", "planted", "unchecked")[p % 3]
        found.append(
            EvidenceRecord(
                run_id="fixture",
                round=round,
                property=Property(
                    id=f"forward.block_{p:03}.out" if p % 9 else f"nan.inf_{p}",
                    kind=kind,
                    level=p % 4,
                    description=LONG if p % 8 == 3 else "outputs match the reference",
                ),
                outcome=OUTCOMES[(p * 7 + round * (p % 3)) % 3],
                score=((p * 31 + round) % 1000) / 1000,
                context={"seed": round},
                observations=_observations(p, round),
                trace=""
                if (p + round) % 3 != 2
                else f'Traceback ...\n  File "m.py", line {p}\nValueError: 0.{p}5 differs\n',
                time=1_700_000_000.0 + round,
            )
        )
    return found


def _renderings(path: Path) -> str:
    with EvidenceStore(path) as store:
        for round in (1, 2, 3):
            store.record_round("fixture", round, candidate_commit=f"{round:x}" * 40)
            store.append_many(_records(round, 90))
        parts = []
        for budget in BUDGETS:
            for up_to_round, previous_round in ((None, None), (1, None), (3, None), (3, 1), (2, 2)):
                text = store.render_for_prompt(budget, up_to_round=up_to_round, previous_round=previous_round)
                parts.append(
                    f"===== max_chars={budget} up_to_round={up_to_round} previous_round={previous_round}\n{text}\n"
                )
    return "".join(parts)


def test_render_for_prompt_is_byte_identical_to_the_recorded_text(tmp_path):
    text = _renderings(tmp_path / "evidence.sqlite")
    if os.environ.get("TWIN_REWRITE_RENDER_FIXTURE") == "1":
        EXPECTED.write_text(text, encoding="utf-8")
    expected = EXPECTED.read_text(encoding="utf-8")
    assert len(expected) > 100_000  # the fixture holds every budget's text, not a stub
    assert text == expected
