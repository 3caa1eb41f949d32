from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.views import round_tally, summarize, tally

ALL_MOVES = {
    # property: (outcome after round 1 or None, outcome after round 2 or None)
    "reg": ("established", "violated"),
    "fix": ("violated", "established"),
    "newly_est": ("not_established", "established"),
    "newly_vio": ("not_established", "violated"),
    "lost_est": ("established", "not_established"),
    "lost_vio": ("violated", "not_established"),
    "keep_est": ("established", "established"),
    "keep_vio": ("violated", "violated"),
    "keep_ne": ("not_established", "not_established"),
    "fresh": (None, "violated"),
}
EXPECTED = {
    "regressions": ["reg"],
    "fixed": ["fix"],
    "newly_established": ["newly_est"],
    "newly_violated": ["newly_vio"],
    "became_not_established": ["lost_est", "lost_vio"],
    "still_established": ["keep_est"],
    "still_violated": ["keep_vio"],
    "still_not_established": ["keep_ne"],
    "new": ["fresh"],
    "gone": [],
}


def _rec(
    pid: str,
    outcome: str,
    round: int,
    *,
    kind: str = "differential",
    level: int = 1,
    **fields: object,
) -> EvidenceRecord:
    return EvidenceRecord(
        run_id="r",
        round=round,
        outcome=Outcome(outcome),
        property=Property(id=pid, kind=kind, level=level),
        **fields,
    )


def test_every_move_between_two_rounds_lands_in_exactly_one_category(store):
    for pid, (first, second) in ALL_MOVES.items():
        if first:
            store.append(_rec(pid, first, 1))
        store.append(_rec(pid, second, 2))
    store.append(_rec("unchecked_in_round_2", "established", 1))
    change = store.transitions(1, 2)
    got = {name: [c.property_id for c in getattr(change, name)] for name in EXPECTED}
    assert got == EXPECTED | {"still_established": ["keep_est", "unchecked_in_round_2"]}
    [reg] = change.regressions
    assert reg.before.outcome == Outcome.ESTABLISHED and reg.after.outcome == Outcome.VIOLATED
    assert list(change.categories())[0] == "regressions"


def test_going_backwards_lists_properties_first_seen_later_as_gone(store):
    store.append(_rec("old", "established", 1))
    store.append(_rec("later", "violated", 2))
    change = store.transitions(2, 1)
    assert [c.property_id for c in change.gone] == ["later"]
    assert change.gone[0].after is None
    assert [c.property_id for c in change.still_established] == ["old"]


def test_summary_counts_latest_outcomes_per_kind_and_level(store):
    store.append_many(
        [
            _rec("imports", "established", 0, kind="imports", level=0),
            _rec("fwd", "violated", 1, kind="differential", level=1),
            _rec("fwd", "established", 2, kind="differential", level=1),
            _rec("loss", "not_established", 2, kind="differential", level=2),
        ]
    )
    summary = store.summary()
    assert summary.properties == 3
    assert summary.by_outcome == {"established": 2, "violated": 0, "not_established": 1}
    assert summary.by_kind == {
        "differential": {"established": 1, "not_established": 1},
        "imports": {"established": 1},
    }
    assert summary.by_level == {
        0: {"established": 1},
        1: {"established": 1},
        2: {"not_established": 1},
    }
    assert not summary.all_established
    assert store.summary(up_to_round=1).by_outcome["violated"] == 1
    assert summarize({}).properties == 0 and not summarize({}).all_established


def test_the_stores_summary_agrees_with_counting_the_latest_records(store):
    for round in range(4):
        store.append_many(
            _rec(
                f"p{i}",
                ("established", "violated", "not_established")[(i + round) % 3],
                round,
                kind=("jit", "imports")[i % 2],
                level=i % 3,
            )
            for i in range(12 + round)
        )
    for up_to in (None, 0, 2):
        assert store.summary(up_to_round=up_to) == summarize(store.latest(up_to_round=up_to), up_to)


def test_the_tally_counts_candidate_properties_by_their_latest_outcome(store):
    store.append_many([_rec("a", "violated", 1), _rec("a", "violated", 1), _rec("b", "violated", 1)])
    store.append_many([_rec("a", "established", 2), _rec("b", "established", 2), _rec("c", "not_established", 2)])
    store.append(_rec("boundary:x:read", "violated", 2, kind="boundary"))
    store.append(_rec("unchecked.decoding", "not_established", 2, kind="unchecked"))
    assert tally(store.latest(up_to_round=1)) == {"established": 0, "violated": 2, "not_established": 0}
    assert tally(store.latest()) == {"established": 2, "violated": 0, "not_established": 1}
    assert round_tally(store, 1, candidate_only=True) == tally(store.latest(up_to_round=1))
    assert round_tally(store, 2, candidate_only=True) == {"established": 2, "violated": 0, "not_established": 1}
    # Counting the records about the run too adds the refusal and the unchecked part.
    assert round_tally(store, 2, candidate_only=False) == {"established": 2, "violated": 1, "not_established": 2}
