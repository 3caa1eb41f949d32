"""The one rule that turns a crash's blame into an outcome, for matched probes and checks alike."""

from __future__ import annotations

import pytest

from evidence_store.records import Outcome, Property
from probes.outcomes import crash_outcome, crash_result

PROP = Property(id="fwd.logits", kind="differential", level=1)


@pytest.mark.parametrize(
    ("blame", "outcome"),
    [
        ("candidate", Outcome.VIOLATED),
        ("timeout", Outcome.VIOLATED),
        ("probe", Outcome.NOT_ESTABLISHED),
        ("unknown", Outcome.NOT_ESTABLISHED),
    ],
)
def test_blame_decides_the_outcome_of_a_crash(blame, outcome):
    assert crash_outcome(blame) is outcome
    run = {"ok": False, "blame": blame, "trace": f"Traceback ... ({blame})"}
    result = crash_result(PROP, run, {"seed": 0}, not_fitting="failed in {blame} code", forbidden_imports=[])
    assert result.outcome is outcome and result.trace == run["trace"] and result.context == {"seed": 0}
    if outcome is Outcome.VIOLATED:
        assert result.score == 0.0
        assert result.observations == {"message": f"the candidate crashed ({blame})", "forbidden_imports": []}
    else:
        assert result.score is None and result.observations == {"message": f"failed in {blame} code"}
