"""The Diagnoser's reading reaches the Migrator: the spans a diagnosis cites, read from the original."""

from __future__ import annotations

import json

from harness.run.directory import RunConfig
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from harness.scaffolds.twin.handoff import cited, handoff_text, span_text
from roles.schemas import Diagnosis, Gap
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

SOURCE = plans.TINY_TASK / "environment" / "source"


def diagnosis(*, sources=(), evidence=()) -> Diagnosis:
    return Diagnosis(summary="s", gaps=[Gap(title="t", objective="o", sources=list(sources), evidence=list(evidence))])


def test_a_diagnosis_cites_its_sources_and_the_file_lines_of_its_evidence_once_each():
    d = diagnosis(sources=["/source/calc/ops.py:scale", "calc/ops.py:4-6"], evidence=["calc.ops", "calc/ops.py:4-6"])
    assert cited(d) == ["/source/calc/ops.py:scale", "calc/ops.py:4-6"]


def test_lines_a_definition_and_a_single_line_are_read_numbered_from_the_original():
    assert span_text("/source/calc/ops.py:4-6", SOURCE, "/source") == (
        '/source/calc/ops.py:4-6\n4 | def add(a, b):\n5 |     """Elementwise sum."""\n'
        "6 |     return np.asarray(a) + np.asarray(b)"
    )
    scale = span_text("calc/ops.py:scale", SOURCE, "/source")
    assert scale.startswith("/source/calc/ops.py:9-11\n 9 | def scale(x, k):") and scale.endswith("* k")
    around = span_text("/source/calc/ops.py:1", SOURCE, "/source")
    assert around.startswith("/source/calc/ops.py:1-11\n") and "def add" in around  # the line and those after it


def test_a_span_outside_the_original_or_not_in_it_is_never_read(tmp_path):
    (tmp_path / "secret.py").write_text("TOKEN = 1\n")
    source = tmp_path / "source"
    source.mkdir()
    (source / "link.py").symlink_to(tmp_path / "secret.py")
    for entry in ("/source/../secret.py:1", "/etc/passwd:1", "../secret.py:1", "link.py:1", "/source/none.py:1"):
        assert span_text(entry, source, "/source") is None, entry
    assert span_text("/source/calc/ops.py:missing", SOURCE, "/source") is None


def test_an_entry_python_cannot_take_is_left_out_never_an_error():
    huge, nul = "calc/ops.py:" + "1" * 5000, "calc/ops.py\x00:1"  # int() refuses 4,300 digits; resolve() a NUL
    assert cited(diagnosis(sources=[huge, nul])) == []
    assert handoff_text(diagnosis(sources=[huge, nul]), SOURCE, "/source", limit=1000) == ""
    assert span_text("calc/ops.py:123456789", SOURCE, "/source") is None  # past the end: nothing to show


def test_past_the_first_cited_spans_entries_are_named_not_read(monkeypatch):
    import harness.scaffolds.twin.handoff as handoff

    read: list[str] = []
    real = handoff.span_text
    monkeypatch.setattr(handoff, "span_text", lambda entry, *a: (read.append(entry), real(entry, *a))[1])
    entries = [f"/source/calc/ops.py:Nope{i}" for i in range(handoff.MAX_ENTRIES + 5)]
    text = handoff_text(diagnosis(sources=entries), SOURCE, "/source", limit=10_000)
    assert len(read) == handoff.MAX_ENTRIES
    assert f"/source/calc/ops.py:Nope{handoff.MAX_ENTRIES} (past the first {handoff.MAX_ENTRIES} cited spans)" in text


def test_what_does_not_fit_the_stated_size_is_named_not_cut():
    d = diagnosis(sources=["/source/calc/ops.py:add", "/source/calc/ops.py:scale", "/source/calc/gone.py:3"])
    text = handoff_text(d, SOURCE, "/source", limit=120)
    assert "def add(a, b):" in text and "def scale" not in text
    assert "Not included: /source/calc/ops.py:scale (over the 120-character size of this section); " in text
    assert "/source/calc/gone.py:3 (not found in the original)" in text


def test_the_migrators_first_message_holds_the_cited_spans_and_the_summary_counts_its_reads(tmp_path):
    cite = plans.diagnose()
    cite["tool_calls"][0]["arguments"]["diagnosis"]["gaps"][0]["sources"] = ["/source/calc/ops.py:1-11"]
    replies = [cite, plans.call("read_file", path="/source/calc/ops.py"), *plans.migrate(plans.OPS_GOOD)]
    replies += plans.verify_with_new_probe()
    script = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=script, rounds=1, sandbox="none", grade=False)
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    run_migration(inputs, SCAFFOLDS)
    calls = [json.loads(line) for line in inputs.run.trajectory.read_text().splitlines() if '"model_call"' in line]
    task = next(c for c in calls if c["role"] == "migrator")["request"]["messages"][1]["content"]
    assert "# The original at the spans the diagnosis cites" in task
    assert ' 9 | def scale(x, k):\n10 |     """Multiply by k."""\n11 |     return np.asarray(x) * k' in task
    assert "sources: /source/calc/ops.py:1-11" in task  # the diagnosis names them too
    summary = inputs.run.summary.read_text()
    assert "- the Migrator's reads of the original: 1 (round 1: 1), each a read_file or a command naming /source" in (
        summary
    )
