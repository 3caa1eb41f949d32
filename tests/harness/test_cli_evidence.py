from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager

import pytest

from evidence_store.records import EvidenceRecord, Outcome, Property
from evidence_store.store import STORE_FILENAME, EvidenceStore
from harness.cli.app import main
from probes import rerun
from probes.suite import SuiteRun


def _rec(pid: str, outcome: str, round: int, **fields: object) -> EvidenceRecord:
    return EvidenceRecord(
        run_id="r1",
        round=round,
        outcome=Outcome(outcome),
        property=Property(id=pid, kind=fields.pop("kind", "differential"), level=1),
        **fields,
    )


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """`runs/r1/` under a fresh working directory, with two rounds of evidence."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "160")
    path = tmp_path / "runs" / "r1"
    path.mkdir(parents=True)
    with EvidenceStore(path / STORE_FILENAME) as store:
        store.append_many(
            [
                _rec("fwd.logits", "established", 1),
                _rec("imports", "violated", 1, kind="imports", trace="ImportError: torch"),
                _rec("loss", "not_established", 1),
            ]
        )
        store.append_many(
            [_rec("fwd.logits", "violated", 2, score=0.31), _rec("loss", "established", 2)]
        )
    return path


def test_show_lists_the_latest_state_with_counts(run_dir, capsys):
    assert main(["evidence", "show", "r1"]) == 0
    out = capsys.readouterr().out
    assert "fwd.logits" in out and "0.31" in out and "ImportError: torch" in out
    assert "3 properties (latest outcome of each): established=1 violated=2 not_established=0" in out


def test_show_marks_a_property_compared_against_a_re_implementation(run_dir, capsys):
    from evidence_store.records import ReferenceRun

    run = ReferenceRun(not_ran=["pkg.train.fit"], on_interface=["pkg.train.fit"])
    with EvidenceStore(run_dir / STORE_FILENAME) as store:
        store.append_many([_rec("fit", "established", 2, reference_run=run)])
    assert main(["evidence", "show", "r1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if " fit (differential" in line)
    assert lines[at].startswith("established (against a re-implementation) fit")
    assert "the reference never ran pkg.train.fit" in lines[at + 1] and "interface: pkg.train.fit" in lines[at + 1]


def test_a_violated_score_that_rounds_to_one_says_how_far_short_it_is(run_dir, capsys):
    with EvidenceStore(run_dir / STORE_FILENAME) as store:  # a fault planted 5e-05 away, caught
        store.append_many([_rec("planted:fwd.logits", "violated", 3, kind="planted", score=0.99995)])
    assert main(["evidence", "show", "r1", "--records"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "planted:fwd.logits" in x)
    assert line.startswith("violated") and line.endswith("score 1.0 (1 - 5e-05)")


def test_show_after_a_round_and_of_one_kind(run_dir, capsys):
    assert main(["evidence", "show", str(run_dir), "--round", "1", "--kind", "differential"]) == 0
    out = capsys.readouterr().out
    assert (
        "after round 1" in out
        and "not_established" in out
        and "imports" not in out.split("\n", 3)[3]
    )
    assert main(["evidence", "show", "r1", "--records"]) == 0
    assert capsys.readouterr().out.count("fwd.logits") == 2


def test_diff_puts_regressions_first(run_dir, capsys):
    assert main(["evidence", "diff", "r1", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert out.index("regressions") < out.index("newly established")
    assert "1 regressions, 1 still violated, 1 newly established" in out


def test_export_to_stdout_and_to_a_file(run_dir, capsys, tmp_path):
    assert main(["evidence", "export", "r1"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sum(x["type"] == "evidence" for x in lines) == 5
    target = tmp_path / "out.jsonl"
    assert main(["evidence", "export", "r1", "-o", str(target)]) == 0
    assert len(target.read_text().splitlines()) == len(lines)
    assert main(["evidence", "import", "r1", str(target)]) == 0
    with EvidenceStore.open_run("r1") as store:
        assert store.count() == 10


def _suite_on(ctx, seen: list | None = None):
    """A stand-in for `probes.suite.run_suite` that hands the probes `ctx` and notes what it ran on."""

    @contextmanager
    def run_suite(task, candidate, probes, **_options):
        if seen is not None:
            seen.append((str(task), str(candidate)))
        yield SuiteRun(ctx=ctx, results=[r for probe in probes for r in probe(ctx)])

    return run_suite


def test_rerun_appends_the_new_result(run_dir, capsys, monkeypatch, tmp_path):
    (tmp_path / "cli_rerun_factory.py").write_text(
        "from evidence_store.records import ProbeResult, Property\n"
        "def make():\n"
        "    prop = Property(id='fwd.logits', kind='differential')\n"
        "    return lambda ctx: ProbeResult(property=prop, outcome='established', score=ctx)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(rerun, "run_suite", _suite_on(0.99))
    monkeypatch.setattr(rerun, "load_task", lambda path: path)  # the stand-in suite takes the task's path
    spec = rerun.RerunSpec(factory="cli_rerun_factory:make", task="t", candidate="c")
    with EvidenceStore.open_run("r1") as store:
        rid = store.append(_rec("fwd.logits", "violated", 2, context={"rerun": spec.to_context()}))
    assert main(["evidence", "rerun", "r1", str(rid)]) == 0
    assert "0.99" in capsys.readouterr().out
    with EvidenceStore.open_run("r1") as store:
        assert store.latest()["fwd.logits"].outcome == Outcome.ESTABLISHED
        assert store.latest()["fwd.logits"].context["rerun_of"] == rid


def test_rerun_takes_task_and_candidate_from_the_run_directory(
    run_dir, capsys, monkeypatch, tmp_path
):
    (tmp_path / "cli_rerun_factory2.py").write_text(
        "from evidence_store.records import ProbeResult, Property\n"
        "def make(limit):\n"
        "    prop = Property(id='loss', kind='differential')\n"
        "    return lambda ctx: [ProbeResult(property=prop, outcome='violated', score=limit)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (run_dir / "config.json").write_text(json.dumps({"task": "/tasks/t-mini", "model": "m"}))
    (run_dir / "candidate").mkdir()
    seen = []
    monkeypatch.setattr(rerun, "run_suite", _suite_on(None, seen))
    monkeypatch.setattr(rerun, "load_task", lambda path: path)  # the stand-in suite takes the task's path
    spec = {"factory": "cli_rerun_factory2:make", "options": {"limit": 0.5}}
    with EvidenceStore.open_run("r1") as store:
        rid = store.append(_rec("loss", "established", 2, context={"rerun": spec}))
    assert main(["evidence", "rerun", "r1", str(rid), "--round", "3"]) == 0
    assert seen == [("/tasks/t-mini", str(run_dir / "candidate"))]
    assert main(["evidence", "rerun", "r1", str(rid), "--candidate", "/elsewhere"]) == 0
    assert seen[-1] == ("/tasks/t-mini", "/elsewhere")
    with EvidenceStore.open_run("r1") as store:
        [first, second] = store.records(property_id="loss")[-2:]
    assert first.round == 3 and first.outcome == Outcome.VIOLATED
    assert second.context["rerun"]["candidate"] == "/elsewhere"


def test_an_empty_store_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    EvidenceStore.open_run("empty").close()
    assert main(["evidence", "show", "empty"]) == 0
    assert "no evidence recorded yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "nope"], "no run directory 'nope'"),
        (["show", "r1", "--round", "7"], "has no round 7 (rounds: 1, 2)"),
        (
            ["show", "r1", "--kind", "jit"],
            "has no evidence of kind 'jit' (kinds: differential, imports)",
        ),
        (["diff", "r1", "1", "5"], "has no round 5"),
        (["rerun", "r1", "99"], "has no evidence record 99"),
        (["rerun", "r1", "1"], "record 1 cannot be re-run"),
        (["rerun", "r1", "1", "--round", "-1"], "round must be non-negative"),
        (["import", "r1", "missing.jsonl"], "no such file: missing.jsonl"),
        (["export", "r1", "-o", "no/such/dir/out.jsonl"], "is not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_dir, capsys, argv, message):
    assert main(["evidence", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in " ".join(err.split()) and err.startswith("error:")
    assert len(err.splitlines()) <= 2  # one line, though rich may wrap a long path


def test_a_run_without_a_store_is_refused_without_creating_one(tmp_path):
    (tmp_path / "runs" / "bare").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "evidence", "show", "bare"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "no evidence store at runs/bare/evidence.sqlite" in proc.stderr
    assert not (tmp_path / "runs" / "bare" / STORE_FILENAME).exists()


def test_a_store_from_a_newer_twin_is_refused_by_the_cli(run_dir, capsys):
    import sqlite3

    conn = sqlite3.connect(run_dir / STORE_FILENAME)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    assert main(["evidence", "show", "r1"]) == 2
    assert "schema version 99, newer than" in " ".join(capsys.readouterr().err.split())


def test_piped_show_prints_whole_lines_with_the_deciding_numbers(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    path = tmp_path / "runs" / "r2"
    path.mkdir(parents=True)
    outputs = {
        f"logits_t{i}": {"measure": "tensor", "score": 0.5, "tolerance": 1e-6, "noise": 1e-8, "ok": False}
        for i in range(7)
    }
    outputs["loss"] = {"measure": "scalar", "score": 1.0, "tolerance": 1e-6, "noise": 0.0, "ok": True}
    long_id = "forward.a_property_id_long_enough_to_be_cut_by_an_eighty_column_table.logits"
    with EvidenceStore(path / STORE_FILENAME) as store:
        store.append_many(
            [
                _rec(long_id, "violated", 1, score=0.5, observations={"outputs": outputs}),
                _rec(
                    "localization",
                    "violated",
                    1,
                    kind="localization",
                    observations={"component": "pkg.model.MLP", "probes": [long_id], "round": 1},
                ),
                _rec("unchecked:grads", "not_established", 1, kind="unchecked"),
            ]
        )
    assert main(["evidence", "show", "r2"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "─│┃━┏")  # no table when piped
    assert f"violated        {long_id} (differential, L1) round 1" in out
    for i in range(5):
        assert f"    logits_t{i}: tensor distance 0.5 > tolerance 1e-06 (noise 1e-08)" in out
    assert "logits_t5" not in out and "(+2 more failing outputs)" in out
    listed = [line.split()[1] for line in out.splitlines() if line.startswith(("violated ", "not_established "))]
    assert listed == [long_id]  # the localization and what was left unchecked are shown apart, not counted
    assert "Localization after round 1: the divergence starts at pkg.model.MLP of the original" in out
    assert "1 properties (latest outcome of each): established=0 violated=1 not_established=0" in out
