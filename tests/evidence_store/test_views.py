from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.views import render, summarize

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
    "became_unresolved": ["lost_est", "lost_vio"],
    "still_established": ["keep_est"],
    "still_violated": ["keep_vio"],
    "still_unresolved": ["keep_ne"],
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


def test_prompt_puts_regressions_then_violated_then_unresolved_then_established(store):
    store.append_many([_rec("a_reg", "established", 1), _rec("z_ok", "established", 1)])
    store.append_many(
        [
            _rec(
                "a_reg",
                "violated",
                2,
                score=0.125,
                trace="Traceback\n  ...\nValueError: shapes differ",
            ),
            _rec("b_vio", "violated", 2, observations={"mismatch": ["logits.shape"]}),
            _rec("c_ne", "not_established", 2, trace="TypeError: probe assumed apply(x)"),
            _rec("d_ok", "established", 2),
        ]
    )
    text = store.render_for_prompt(4000)
    order = [
        text.index(s)
        for s in (
            "REGRESSED a_reg",
            "VIOLATED b_vio",
            "UNRESOLVED c_ne",
            "Established (2): d_ok, z_ok",
        )
    ]
    assert order == sorted(order)
    assert "established in round 1" in text and "ValueError: shapes differ" in text
    assert "score 0.125" in text and "logits.shape" in text
    assert "more not shown" not in text
    assert text.startswith(
        "Evidence after round 2: 5 properties; 2 established, 2 violated "
        "(1 regressed since round 1), 1 not established."
    )


def test_prompt_of_an_earlier_round_measures_regressions_against_the_round_before(store):
    store.append(_rec("p", "established", 0))
    store.append(_rec("p", "violated", 1))
    store.append(_rec("p", "established", 2))
    assert "REGRESSED p" in store.render_for_prompt(up_to_round=1)
    assert "REGRESSED" not in store.render_for_prompt(up_to_round=1, previous_round=1)
    assert "REGRESSED" not in store.render_for_prompt()
    assert store.render_for_prompt().endswith("Established (1): p")


def test_prompt_of_an_empty_store_is_short_and_says_so(store):
    assert store.render_for_prompt(200) == (
        "Evidence all rounds: 0 properties; 0 established, 0 violated, 0 not established."
    )


def _latest(n_vio: int, n_ne: int, n_est: int) -> dict[str, EvidenceRecord]:
    records = (
        [_rec(f"v{i:03}", "violated", 1, trace="E" * (i % 200)) for i in range(n_vio)]
        + [_rec(f"n{i:03}", "not_established", 1) for i in range(n_ne)]
        + [_rec(f"e{i:03}", "established", 1) for i in range(n_est)]
    )
    return {r.property.id: r for r in records}


@settings(max_examples=150, deadline=None)
@given(
    n_vio=st.integers(0, 30),
    n_ne=st.integers(0, 30),
    n_est=st.integers(0, 60),
    max_chars=st.integers(1, 6000),
)
def test_prompt_never_exceeds_its_budget_and_counts_what_it_left_out(n_vio, n_ne, n_est, max_chars):
    latest = _latest(n_vio, n_ne, n_est)
    text = render(latest, None, max_chars=max_chars, round=1)
    assert len(text) <= max_chars
    match = re.search(r"\[(\d+) more not shown: ([^\]]*)\]$", text)
    if match is None:
        if text.endswith("…"):
            return  # a budget smaller than the header itself: cut, still within budget
        assert text.count("\n- ") == n_vio + n_ne
        assert (f"Established ({n_est}): " in text) == (n_est > 0)
        return
    shown = text.count("\n- VIOLATED") + text.count("\n- UNRESOLVED")
    established_line = re.search(r"Established \(\d+\): (.*)", text)
    shown_est = len(established_line.group(1).split(", ")) if established_line else 0
    assert int(match.group(1)) == n_vio + n_ne + n_est - shown - shown_est
    # Strict priority: nothing of a later section is shown while an earlier one is cut.
    if text.count("\n- VIOLATED") < n_vio:
        assert "UNRESOLVED" not in text and "Established" not in text
    if shown < n_vio + n_ne:
        assert "Established" not in text


def test_a_tight_budget_keeps_violations_and_drops_established_first():
    latest = _latest(3, 0, 200)
    text = render(latest, None, max_chars=600, round=1)
    assert len(text) <= 600
    assert text.count("- VIOLATED") == 3
    assert re.search(r"\[\d+ more not shown: \d+ established\]$", text)


def test_render_refuses_a_non_positive_budget():
    with pytest.raises(ValueError, match="positive"):
        render({}, None, max_chars=0, round=None)


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
