"""Python API probes: same calls on both packages, results with types, exceptions by type."""

from __future__ import annotations

from evidence_store.records import Outcome
from probes.services.python_api import python_api_probe
from tests.probes.services.conftest import ORIGINAL_LIB

CASES = {
    "plain": [{"call": "verlib:parse_version", "args": ["1.2.3"]}],
    "short": [{"call": "verlib:parse_version", "args": ["4"]}],
    "bad": [{"call": "verlib:parse_version", "args": ["x.1"]}],
    "state": [{"call": "verlib:bump"}, {"call": "verlib:bump"}],
}


def by_id(results):
    return {r.property.id: r for r in results}


def test_identical_packages_establish_every_case(tiny_context):
    results = by_id(python_api_probe(CASES)(tiny_context()))
    assert {r.outcome for r in results.values()} == {Outcome.ESTABLISHED}
    # forked per case: the second case sees a fresh counter, both sides alike
    assert results["python_api:state"].observations["reference"]["calls"][1]["value"] == {
        "$int": "2"
    }


def test_a_list_is_not_a_tuple(tiny_context):
    lib = ORIGINAL_LIB.replace("return tuple(int(p)", "return list(int(p)")
    results = by_id(python_api_probe(CASES)(tiny_context(lib=lib)))
    assert results["python_api:plain"].outcome == Outcome.VIOLATED
    assert results["python_api:bad"].outcome == Outcome.ESTABLISHED


def test_exception_type_matters_and_message_only_when_asked(tiny_context):
    lib = ORIGINAL_LIB.replace(
        'raise ValueError(f"bad version {text!r}")', 'raise TypeError("bad version")'
    )
    results = by_id(python_api_probe(CASES)(tiny_context(lib=lib)))
    assert results["python_api:bad"].outcome == Outcome.VIOLATED
    assert (
        "raised ValueError != raised TypeError"
        in results["python_api:bad"].observations["differences"][0]
    )

    reworded = ORIGINAL_LIB.replace('f"bad version {text!r}"', '"not a version"')
    loose = by_id(python_api_probe(CASES)(tiny_context(lib=reworded)))
    strict = by_id(
        python_api_probe(CASES, {"exception_messages": True})(tiny_context(lib=reworded))
    )
    assert loose["python_api:bad"].outcome == Outcome.ESTABLISHED
    assert strict["python_api:bad"].outcome == Outcome.VIOLATED
    assert strict["python_api:bad"].context["comparison"]["exception_messages"] is True


def test_forbidden_package_is_refused_on_the_candidate_side(tiny_context):
    ctx = tiny_context(lib="import oldlib\n" + ORIGINAL_LIB)
    (ctx.candidate / "oldlib.py").write_text("VERSION = 1\n")  # present, yet refused
    results = by_id(python_api_probe(CASES)(ctx))
    call = results["python_api:plain"].observations["candidate"]["calls"][0]
    assert call["raised"] == "ModuleNotFoundError"
    assert results["python_api:plain"].outcome == Outcome.VIOLATED


def test_results_carry_a_rerun_spec(tiny_context):
    result = python_api_probe({"plain": CASES["plain"]})(tiny_context())[0]
    rerun = result.context["rerun"]
    assert rerun["factory"] == "probes.services.matched:factory"
    assert rerun["options"]["cases"][0]["input"]["calls"][0]["args"] == ["1.2.3"]
    assert result.context["comparison_digest"]
