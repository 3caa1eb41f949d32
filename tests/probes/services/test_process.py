"""Process probes: same argv, stdin and files; exit status, output and files compared."""

from __future__ import annotations

from evidence_store.records import Outcome
from probes.services.process import process_probe
from tests.probes.services.conftest import ORIGINAL_CLI

RUNS = {
    "upper": {"argv": ["{python}", "{root}/cli.py", "upper"], "stdin": "abc"},
    "save": {
        "argv": ["{python}", "{root}/cli.py", "save"],
        "stdin": "kept",
        "files": {"cache.tmp": "old"},
    },
    "unknown": {"argv": ["{python}", "{root}/cli.py", "zip"]},
}


def by_id(results):
    return {r.property.id: r for r in results}


def test_same_program_establishes_every_run(tiny_context):
    results = by_id(process_probe(RUNS)(tiny_context()))
    assert {r.outcome for r in results.values()} == {Outcome.ESTABLISHED}
    assert results["process:save"].observations["reference"]["files"] == {
        "out.txt": {"text": "kept"}
    }
    assert results["process:save"].observations["reference"]["removed"] == ["cache.tmp"]


def test_file_left_behind_is_a_difference(tiny_context):
    cli = ORIGINAL_CLI.replace('        os.remove("cache.tmp")', "        pass")
    results = by_id(process_probe(RUNS)(tiny_context(cli=cli)))
    assert results["process:save"].outcome == Outcome.VIOLATED
    assert any("removed files" in d for d in results["process:save"].observations["differences"])
    assert results["process:upper"].outcome == Outcome.ESTABLISHED


def test_exit_status_and_stderr(tiny_context):
    cli = ORIGINAL_CLI.replace("sys.exit(2)", "sys.exit(1)")
    results = by_id(process_probe(RUNS)(tiny_context(cli=cli)))
    assert results["process:unknown"].outcome == Outcome.VIOLATED
    assert results["process:unknown"].observations["differences"] == ["exit: 2 != 1"]


def test_ignored_files_are_recorded_with_the_result(tiny_context):
    cli = ORIGINAL_CLI.replace('open("out.txt", "w")', 'open("out.log", "w")')
    strict = by_id(process_probe(RUNS)(tiny_context(cli=cli)))["process:save"]
    loose = by_id(process_probe(RUNS, {"ignore_files": ["out.*"]})(tiny_context(cli=cli)))[
        "process:save"
    ]
    assert strict.outcome == Outcome.VIOLATED
    assert loose.outcome == Outcome.ESTABLISHED
    assert loose.context["comparison"]["ignore_files"] == ["out.*"]
    assert loose.context["comparison_digest"] != strict.context["comparison_digest"]
