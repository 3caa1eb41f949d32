"""Evidence rendered for a reader: whole records, deciding numbers, machine-independent text."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence_store import numbers
from evidence_store.reading import (
    CLOSEST_SHOWN,
    FAILING_SHOWN,
    OWN_FAILING_SHOWN,
    Seen,
    changes,
    output_line,
    property_block,
    render,
)
from evidence_store.records import EvidenceRecord, Outcome, Property


def _rec(pid: str, outcome: str, round: int = 1, *, kind: str = "differential", **fields) -> EvidenceRecord:
    description = fields.pop("description", f"{pid} matches the original")
    return EvidenceRecord(
        run_id="r",
        round=round,
        outcome=Outcome(outcome),
        property=Property(id=pid, kind=kind, level=1, description=description),
        **fields,
    )


def _output(score: float, noise: float, ok: bool, measure: str = "tensor") -> dict:
    tolerance = 10 * max(noise, 2.0**-23)
    return {"measure": measure, "score": score, "noise": noise, "tolerance": tolerance, "ok": ok}


def _differential(
    pid: str, failing: int, passing: int, *, jitter: float = 0.0, noise_factor: float = 1.0
) -> EvidenceRecord:
    """A violated differential record; `jitter` and `noise_factor` play a different machine."""
    outputs = {}
    for i in range(failing):
        score = (0.546212958 - i / 100) * (1 + jitter)
        outputs[f"{pid}/bad{i}"] = _output(score, 7.120686817962962e-09 * noise_factor * (1 + jitter), False)
    for i in range(passing):
        outputs[f"{pid}/good{i}"] = _output(1.0 - 1e-8 * (1 + jitter), 3.1e-08 * noise_factor, True)
    score = sum(o["score"] for o in outputs.values()) / len(outputs)
    return _rec(
        pid,
        "violated",
        score=score,
        observations={"outputs": outputs, "structure": [], "noise_floor": 7.1e-9 * noise_factor},
    )


def _evidence(**machine) -> dict[str, EvidenceRecord]:
    records = [
        _differential("forward.block0", 1, 0, **machine),
        _differential("checkpoint.load", 2, 6, **machine),
        _differential("forward.hidden_states", 9, 2, **machine),
        _rec("imports", "not_established", trace="Traceback\n  File x\nModuleNotFoundError: No module named 'model'"),
    ]
    return {r.property.id: r for r in records}


def _text(latest: dict[str, EvidenceRecord], max_chars: int = 6000) -> str:
    problems = {p: r for p, r in latest.items() if r.outcome != Outcome.ESTABLISHED}
    return render(
        problems, ["audit.vendored", "independence"], None, max_chars=max_chars, round=1, commit="0123456789abcdef"
    )


def test_a_violated_output_shows_distance_against_tolerance_and_its_noise():
    block = property_block(_differential("forward.block0", 1, 0), "VIOLATED")
    assert block.splitlines() == [
        "- VIOLATED forward.block0 (differential, L1): forward.block0 matches the original",
        "    forward.block0/bad0: tensor distance 0.454 > tolerance 1.19e-06 (noise 7.12e-09)",
    ]


def test_every_failing_output_is_listed_up_to_five_and_passing_ones_are_named():
    block = property_block(_differential("p", 9, 2), "VIOLATED")
    assert sum("distance" in line for line in block.splitlines()) == FAILING_SHOWN
    assert "… 4 more failing (not listed)" in block
    assert "    2 other outputs pass: p/good0, p/good1" in block.splitlines()


def test_a_probe_result_shows_the_margin_of_its_passing_outputs():
    block = property_block(_differential("p", 1, 2), "VIOLATED", margins=True)
    passing = [line for line in block.splitlines() if "/good" in line]
    assert len(passing) == 2 and all("distance" in line and "<= tolerance" in line for line in passing)
    assert "    2 outputs pass; closest to their tolerance:" in block.splitlines()


def test_a_probe_result_lists_every_failing_output_and_only_the_passing_ones_closest_to_their_tolerance():
    tolerance = 1e-5
    outputs = {f"bad{i}": _output(0.5, 1e-6, False) for i in range(2)}
    shares = {f"ok{i:02}": (i * 37 % 50) / 50 for i in range(50)}  # every share once, in scrambled order
    for name, share in shares.items():
        outputs[name] = {"measure": "tensor", "score": 1 - share * tolerance, "noise": 1e-6, "tolerance": tolerance,
                         "ok": True}  # fmt: skip
    outputs["band"] = {"measure": "banded", "score": 1.0, "noise": 0.0, "tolerance": 0.1, "ok": True}
    record = _rec("p", "violated", observations={"outputs": outputs, "structure": []})
    lines = property_block(record, "VIOLATED", margins=True).splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:3]] == ["bad0", "bad1"]
    assert lines[3] == "    51 outputs pass; closest to their tolerance:"
    closest = sorted(shares, key=shares.get, reverse=True)[:CLOSEST_SHOWN]
    assert [line.split(":")[0].strip() for line in lines[4 : 4 + CLOSEST_SHOWN]] == closest
    assert lines[4].endswith(f"(noise 1e-06), {numbers.significant(max(shares.values()), 2)} of its tolerance")
    assert lines[4 + CLOSEST_SHOWN] == f"      … {51 - CLOSEST_SHOWN} more passing (not listed)"
    assert len(lines) == 5 + CLOSEST_SHOWN


def test_a_probe_result_lists_failing_outputs_in_full_up_to_its_own_bound():
    record = _differential("p", OWN_FAILING_SHOWN + 3, 0)
    lines = property_block(record, "VIOLATED", margins=True).splitlines()
    assert sum("distance" in line and " > tolerance" in line for line in lines) == OWN_FAILING_SHOWN
    assert lines[-1] == "    … 3 more failing (not listed)"


def test_the_same_evidence_from_another_machine_renders_the_same_canonical_text():
    """Scores jittered in their last digits and noise floors off by a few percent: only digits differ."""
    here = _text(_evidence())
    for seed in range(20):
        rng = random.Random(seed)
        there = _text(_evidence(jitter=rng.uniform(-1e-8, 1e-8), noise_factor=rng.uniform(0.95, 1.05)))
        assert numbers.canonical(there) == numbers.canonical(here)


@pytest.mark.parametrize(
    ("distance", "tolerance", "ok", "line"),
    [
        (1.52e-05, 1.49e-05, False, "y: tensor distance 1.52e-05 > tolerance 1.49e-05 (noise 1.49e-06)"),
        (0.000312, 0.000298, False, "y: tensor distance 0.000312 > tolerance 0.000298 (noise 2.98e-05)"),
        (1.1e-05, 1.5e-05, True, "y: tensor distance 1.1e-05 <= tolerance 1.5e-05 (noise 1.5e-06)"),
    ],
)
def test_a_distance_and_its_tolerance_render_in_one_format_that_shows_the_comparison(distance, tolerance, ok, line):
    output = {"measure": "tensor", "score": 1.0 - distance, "noise": tolerance / 10, "tolerance": tolerance, "ok": ok}
    assert output_line("y", output) == line


def test_a_noise_floor_three_times_larger_changes_digits_only_and_never_which_records_fit():
    for budget in (400, 700, 1000, 6000):
        here, there = _text(_evidence(), budget), _text(_evidence(noise_factor=3.0, jitter=3e-7), budget)
        assert numbers.canonical(here) == numbers.canonical(there)
        assert here.count("\n- ") == there.count("\n- ")


def test_a_record_is_never_cut_and_what_is_dropped_is_counted():
    latest = _evidence()
    full = _text(latest)
    for budget in range(250, len(full), 37):
        text = _text(latest, budget)
        assert len(text) <= budget
        blocks = [b for b in re.split(r"\n(?=- )", text)[1:]]
        for block in blocks:
            block = re.sub(r"\n(Established|\[).*", "", block, flags=re.S)
            assert block in full  # whole, exactly as rendered with room to spare
        dropped = re.search(r"\[(\d+) properties not shown for lack of room", text)
        established = re.search(r"Established \(2\): (.*)", text)
        shown = text.count("\n- ") + (len(established.group(1).split(", ")) if established else 0)
        assert (int(dropped.group(1)) if dropped else 0) == len(latest) + 2 - shown


def test_changes_since_the_previous_round_come_first_new_violations_before_others():
    latest = _evidence()
    previous = {"forward.block0": Seen(Outcome.ESTABLISHED, 0), "checkpoint.load": Seen(Outcome.VIOLATED, 0)}
    problems = {p: r for p, r in latest.items() if r.outcome != Outcome.ESTABLISHED}
    text = render(problems, ["independence"], previous, max_chars=6000, round=1, previous_round=0)
    lines = text.splitlines()
    assert lines[1].startswith(
        "Since round 0: 1 regressed (established before, violated now): forward.block0; "
        "1 newly violated: forward.hidden_states;"
    )
    order = [
        text.index(s)
        for s in (
            "REGRESSED forward.block0",
            "VIOLATED (new) forward.hidden_states",
            "VIOLATED checkpoint.load",
            "NOT ESTABLISHED imports",
        )
    ]
    assert order == sorted(order)
    assert "why: ModuleNotFoundError: No module named 'model'" in text


def test_the_header_names_the_candidate_commit_and_counts_properties():
    assert _text(_evidence()).splitlines()[0] == (
        "Evidence after round 1 on candidate commit 0123456789: 6 properties (latest outcome of each); "
        "2 established, 3 violated, 1 not established."
    )


def test_a_long_message_is_shortened_at_a_word_never_inside_one():
    record = _rec("jit", "violated", kind="jit", observations={"message": "word " * 200 + "0.123456789"})
    why = property_block(record, "VIOLATED").splitlines()[-1]
    assert why.endswith("word …") and len(why) < 260


@pytest.mark.parametrize(
    ("value", "score", "noise"),
    [
        (1.0, "1.0", "1.0"),
        (0.0, "0.0", "0.0"),
        (0.546212958, "0.546", "0.546"),
        (1.1920928955078125e-06, "1.19e-06", "1.19e-06"),
    ],
)
def test_measurements_always_render_as_measurements(value, score, noise):
    assert numbers.score(value) == score and numbers.noise(value) == noise
    assert numbers.canonical(f"x {score} y {noise} round 12") == "x # y # round 12"


def test_canonical_text_masks_commits_but_not_other_hex_or_counts():
    text = f"on candidate {numbers.commit('0123456789abcdef')}: 12 properties, id deadbeef01"
    assert numbers.canonical(text) == "on candidate commit #: 12 properties, id deadbeef01"


def _latest(n_vio: int, n_ne: int, n_est: int) -> tuple[dict[str, EvidenceRecord], list[str]]:
    problems = [_rec(f"v{i:03}", "violated", trace="E" * (i % 200)) for i in range(n_vio)]
    problems += [_rec(f"n{i:03}", "not_established") for i in range(n_ne)]
    return {r.property.id: r for r in problems}, [f"e{i:03}" for i in range(n_est)]


@settings(max_examples=150, deadline=None)
@given(n_vio=st.integers(0, 30), n_ne=st.integers(0, 30), n_est=st.integers(0, 60), max_chars=st.integers(1, 6000))
def test_never_exceeds_its_budget_and_drops_lowest_priority_first(n_vio, n_ne, n_est, max_chars):
    problems, established = _latest(n_vio, n_ne, n_est)
    text = render(problems, established, None, max_chars=max_chars, round=1)
    assert len(text) <= max_chars
    match = re.search(r"\[(\d+) properties not shown for lack of room: ([^\]]*)\]$", text)
    shown = text.count("\n- VIOLATED") + text.count("\n- NOT ESTABLISHED")
    established_line = re.search(r"Established \(\d+\): (.*)", text)
    shown_est = len(established_line.group(1).split(", ")) if established_line else 0
    if match is None:
        if "\n" not in text and (n_vio + n_ne + n_est):
            return  # a budget smaller than the header itself
        assert shown == n_vio + n_ne and shown_est == n_est
        return
    assert int(match.group(1)) == n_vio + n_ne + n_est - shown - shown_est
    if text.count("\n- VIOLATED") < n_vio:
        assert "NOT ESTABLISHED" not in text and "Established" not in text
    if shown < n_vio + n_ne:
        assert "Established" not in text


def test_render_refuses_a_non_positive_budget():
    with pytest.raises(ValueError, match="positive"):
        render({}, [], None, max_chars=0, round=None)


def test_the_store_renders_the_commit_and_leaves_out_what_is_not_about_the_candidate(store):
    store.record_round("r", 1, candidate_commit="feedbeef" * 5)
    store.append_many([_rec("a", "violated"), _rec("boundary:x:read", "violated", kind="boundary")])
    text = store.render_for_prompt(4000)
    assert "on candidate commit feedbeeffe" in text
    assert "1 properties" in text and "boundary" not in text


def test_a_reward_that_rounds_to_one_says_how_far_short_it_is():
    from evidence_store import numbers

    assert numbers.reward(1.0) == "1.0000" and numbers.reward(0.69174164) == "0.6917"
    assert numbers.reward(0.99998777) == "1.0000 (1 - 1.2e-05)"  # a repair from here must show
    assert numbers.reward(0.99999995) != numbers.reward(0.99998777)
    assert numbers.short_of_one(numbers.score(0.99995), 0.99995) == "1.0 (1 - 5e-05)"
    assert numbers.short_of_one(numbers.score(1.0), 1.0) == "1.0"
    assert numbers.short_of_one(numbers.score(0.31), 0.31) == "0.31"


def test_a_property_that_lost_its_outcome_is_named_with_the_outcome_word_the_evidence_uses():
    previous = {"forward.a": Seen(Outcome.ESTABLISHED, 1), "forward.b": Seen(Outcome.VIOLATED, 1)}
    now = {"forward.a": Outcome.NOT_ESTABLISHED, "forward.b": Outcome.NOT_ESTABLISHED}
    assert changes(now, previous).line(1) == (
        "Since round 1: 2 not established now (established or violated before): forward.a, forward.b."
    )


@pytest.mark.parametrize(
    ("source", "extra", "said"),
    [
        ("float64", {}, "(noise 0.0, unrounded)"),
        ("rerun", {}, "(noise 0.0, deterministic)"),
        ("reseed", {}, "(noise 0.0, seed-independent)"),
        ("float64", {"noise_measured": False}, "(noise 0.0, unmeasured)"),
        (None, {}, "(noise 0.0, identical)"),  # a record that does not say where its noise was measured
    ],
)
def test_a_zero_noise_says_why_in_a_word(source, extra, said):
    output = {"measure": "scalar", "score": 1.0, "noise": 0.0, "tolerance": 1.19e-06, "ok": True, **extra}
    assert output_line("loss", output, source) == f"loss: scalar distance 0.0 <= tolerance 1.19e-06 {said}"
    measured = {**output, "noise": 3.2e-09}
    assert output_line("loss", measured, source).endswith("(noise 3.2e-09)")  # a measured noise needs no word


def test_a_stored_record_read_without_its_context_still_says_why_its_noise_is_zero(tmp_path):
    """The prompts' evidence is read without contexts: the noise's source is kept with the outputs."""
    from evidence_store.store import EvidenceStore

    output = {"measure": "tensor", "score": 0.5, "noise": 0.0, "tolerance": 1.19e-06, "ok": False}
    record = _rec("forward", "violated", observations={"outputs": {"y": output}, "noise_source": "float64"})
    with EvidenceStore(tmp_path / "e.sqlite") as store:
        store.append(record)
        text = store.render_for_prompt(4000, up_to_round=1)
    assert "    y: tensor distance 0.5 > tolerance 1.19e-06 (noise 0.0, unrounded)" in text.splitlines()


def test_a_failing_banded_output_shows_its_difference_and_never_a_perfect_looking_similarity():
    close = {"measure": "banded", "score": 0.99999, "noise": 0.0, "tolerance": 0.00339, "ok": False}
    close["difference"] = 0.0041
    assert output_line("mean_loss", close) == (
        "mean_loss: banded, largest difference 0.0041 outside the band 0.00339 (similarity 1.0 (1 - 1e-05))"
    )
    recorded_before = {key: value for key, value in close.items() if key != "difference"}
    assert output_line("mean_loss", recorded_before).startswith("mean_loss: banded, outside the band 0.00339")


def test_a_property_compared_against_a_re_implementation_is_shown_as_such_and_on_the_interface_not_yet_established(
    store,
):
    from evidence_store.reading import outcome_text
    from evidence_store.records import ReferenceRun

    store.append_many(
        [
            _rec("fit", "established", reference_run=ReferenceRun(not_ran=["pkg.fit"], on_interface=["pkg.fit"])),
            _rec("grads", "established", reference_run=ReferenceRun(ran=["pkg.loss"], not_ran=["pkg.helper"])),
            _rec("loss", "established", reference_run=ReferenceRun(ran=["pkg.loss"])),
            _rec("old", "established"),  # recorded before the reference's run was
        ]
    )
    text = store.render_for_prompt(4000)
    assert "- NOT YET ESTABLISHED (against a re-implementation) fit" in text
    said = "the reference never ran pkg.fit: the probe compared against its own re-implementation"
    assert f"{said}; on the task's interface: pkg.fit" in text
    assert "- ESTABLISHED (against a re-implementation) grads" in text
    assert "2 of the established were compared only against a re-implementation" in text
    assert "Established (2): loss, old" in text
    assert "4 properties (latest outcome of each); 4 established" in text  # the tally counts outcomes
    fit = store.latest()["fit"]
    assert outcome_text(fit) == "established (against a re-implementation)"
    assert outcome_text(store.latest()["loss"]) == "established"


def test_without_a_re_implementation_the_text_is_as_before(store):
    from evidence_store.records import ReferenceRun

    traced = _rec("loss", "established", reference_run=ReferenceRun(ran=["pkg.loss"]))
    store.append_many([traced, _rec("a", "violated")])
    text = store.render_for_prompt(4000)
    assert "re-implementation" not in text and "Established (1): loss" in text
