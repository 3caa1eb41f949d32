"""Whole runs of the loop and the base scaffold on the tiny-calc fixture, driven by scripted models."""

from __future__ import annotations

import json
import re

import pytest

from evidence_store.store import EvidenceStore
from harness.cli.app import main
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(
    __import__("shutil").which("bwrap") is None, reason="the loop's tests run the real bwrap sandbox"
)


def start(tmp_path, replies, **settings) -> RunDir:
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, **{"rounds": 2, **settings})
    return RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))


def outcomes(run: RunDir, property_id: str) -> list[tuple[int, str]]:
    store = EvidenceStore(run.evidence, create=False)
    try:
        return [(r.round, r.outcome.value) for r in store.records(property_id=property_id)]
    finally:
        store.close()


def test_probe_goes_from_violated_to_established_and_final_grade_is_full(tmp_path):
    run = start(tmp_path, plans.twin_fix_in_round_two())
    line = run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert [r.done for r in state.rounds] == [["diagnose", "migrate", "verify"]] * 2
    assert outcomes(run, "calc.ops") == [(1, "violated"), (2, "established")]
    assert state.final_round == 2
    grades = json.loads(run.grades.read_text())
    assert [g["reward"] for g in grades["rounds"]] == [0.5, 1.0]
    assert "reward 1.0000" in line
    summary = run.summary.read_text()
    assert "scripted" in summary and "| 2 |" in summary


@pytest.mark.heavy  # a two-round run, graded
def test_regression_in_round_two_is_flagged_and_round_one_is_delivered(tmp_path):
    run = start(tmp_path, plans.twin_regress_in_round_two())
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert outcomes(run, "calc.ops")[-1] == (2, "violated")
    store = EvidenceStore(run.evidence, create=False)
    assert [c.property_id for c in store.transitions(1, 2).regressions] == ["calc.ops"]
    store.close()
    assert state.final_round == 1
    assert "round 1" in state.final_choice
    grades = json.loads(run.grades.read_text())
    assert grades["final_round"] == 1
    assert {g["round"]: g["reward"] for g in grades["rounds"]} == {1: 1.0, 2: 0.5}


def model_calls(run: RunDir) -> int:
    return (
        sum('"model_call"' in line for line in run.trajectory.read_text().splitlines())
        if run.trajectory.exists()
        else 0
    )


@pytest.mark.parametrize(
    ("budget", "kind", "calls"),
    [({"max_calls": 2}, "calls", 2), ({"max_tokens": 250}, "tokens", 3), ({"max_wall_s": 0}, "wall_time", 0)],
)
def test_each_budget_stops_the_run_cleanly(tmp_path, budget, kind, calls):
    run = start(tmp_path, plans.twin_fix_in_round_two(), budget=budget, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert state.status == "finished"
    assert state.stop_reason.startswith(f"budget: {kind} budget exhausted")
    assert model_calls(run) == calls


def test_dollar_budget_stops_the_run(tmp_path):
    replies = plans.twin_fix_in_round_two()
    for reply in replies:
        reply["cost_usd"] = 0.4
    run = start(tmp_path, replies, budget={"max_usd": 1.0}, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert run.load_state().stop_reason.startswith("budget: dollars budget exhausted")


def test_base_scaffold_runs_continuation_rounds_without_evidence(tmp_path):
    run = start(tmp_path, plans.base_two_rounds(), scaffold="base", base_steps=4)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert [r.done for r in state.rounds] == [["migrate"], ["migrate"]]
    assert not run.evidence.exists()
    grades = json.loads(run.grades.read_text())
    assert [g["reward"] for g in grades["rounds"]] == [0.5, 1.0]
    assert state.final_round == 2
    from harness.run.finish import closing_lines

    (listed,) = [line for line in closing_lines(run, run.load_config(), state) if line.startswith("run directory")]
    assert "evidence.sqlite" not in listed and "summary.md" in listed  # only the files it has


def test_refused_requests_land_in_the_audit_log_and_the_evidence(tmp_path):
    replies = [
        plans.call("read_file", path="/tests/test.sh"),
        plans.call("write_file", path="/app/x.py", content="x"),
        plans.call("read_file", path="/source/../../etc/shadow"),
        plans.diagnose(complete=True),
        plans.call("submit", summary="nothing"),
        plans.call("submit", summary="nothing"),
    ]
    run = start(tmp_path, replies, rounds=1, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    audit = [json.loads(line) for line in run.audit_log.read_text().splitlines()]
    assert any(a["target"] == "/tests/test.sh" for a in audit)
    tool_results = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"tool_call"' in line]
    assert tool_results[1]["result"].startswith("error: no tool named 'write_file'")
    store = EvidenceStore(run.evidence, create=False)
    boundary = store.records(kind="boundary")
    store.close()
    assert {r.observations["target"] for r in boundary} >= {"/tests/test.sh"}
    assert all(r.outcome.value == "violated" for r in boundary)


def test_cli_refuses_bad_input_with_one_line(tmp_path, capsys):
    assert main(["migrate", "--model", "scripted:x.json"]) == 2
    assert main(["migrate", "--task", str(tmp_path), "--model", "scripted:x.json"]) == 2
    err = capsys.readouterr().err
    assert "needs --task" in err and "no task.toml" in err
    assert main(["migrate", "--resume", str(tmp_path / "missing")]) == 2
    assert not (tmp_path / "runs").exists()


@pytest.mark.heavy  # litellm's import and a whole run; scripted runs cover the loop in the default suite
def test_a_whole_run_through_litellm_against_a_local_fake_server(tmp_path, monkeypatch):
    from tests.fakes.openai_server import FakeOpenAIServer, error, tool_call

    responses = []
    for reply in plans.twin_fix_in_round_two():
        (only,) = reply["tool_calls"]
        responses.append(tool_call(only["name"], only["arguments"], prompt_tokens=100, completion_tokens=20))
    responses.insert(3, error(429, "slow down"))
    monkeypatch.setenv("TWIN_API_KEY", "sk-fake-key-for-tests")
    with FakeOpenAIServer(responses) as server:
        config = RunConfig.build(task=plans.TINY_TASK, model="openai/fake-model", api_base=server.base_url, rounds=2)
        run = RunDir.create(tmp_path / "runs", config, RunState(run_id="live"))
        run_migration(RunInputs.read(run), SCAFFOLDS)
        assert server.remaining == 0
        first = server.requests[0].body
        assert {t["function"]["name"] for t in first["tools"]} >= {"read_file", "bash", "submit"}
        assert server.requests[0].headers.get("authorization") == "Bearer sk-fake-key-for-tests"
    assert "sk-fake-key-for-tests" not in run.config_path.read_text()
    assert "sk-fake-key-for-tests" not in run.trajectory.read_text()
    state = run.load_state()
    assert state.final_round == 2 and state.spent.calls == len(responses) - 1
    assert json.loads(run.grades.read_text())["rounds"][-1]["reward"] == 1.0


@pytest.mark.heavy  # a run, killed and resumed
def test_killed_run_resumes_from_its_last_complete_step(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    model = plans.write_script(tmp_path / "script.json", plans.twin_with_slow_migration(6))
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "harness.cli.app",
        "migrate",
        "--task",
        str(plans.TINY_TASK),
        "--model",
        model,
        "--rounds",
        "2",
        "--runs-dir",
        str(runs),
        "--run-id",
        "k",
    ]
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trajectory = runs / "k" / "trajectory.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill while the Migrator's slow command runs
        if trajectory.exists() and '"sleep 6"' in trajectory.read_text():
            break
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    run = RunDir(runs / "k")
    killed = run.load_state()
    assert killed.status == "running"
    assert [r.done for r in killed.rounds] == [["diagnose"]]
    assert (run.candidate / "calc" / "ops.py").exists()  # half-done work on disk

    assert main(["migrate", "--resume", "k", "--runs-dir", str(runs)]) == 0
    state = run.load_state()
    assert state.status == "finished"
    assert [r.done for r in state.rounds] == [["diagnose", "migrate", "verify"]] * 2
    assert state.final_round == 2
    assert outcomes(run, "calc.ops") == [(1, "violated"), (2, "established")]
    roles = [json.loads(line)["role"] for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    assert roles.count("diagnoser") == 2  # round 1's diagnosis was not asked for again
    assert json.loads(run.grades.read_text())["rounds"][-1]["reward"] == 1.0


def _requests(run: RunDir) -> list[dict]:
    lines = [json.loads(line) for line in run.trajectory.read_text().splitlines()]
    return [r for r in lines if r.get("type") == "model_call"]


def _first_prompt(run: RunDir, role: str, round: int) -> str:
    call = next(c for c in _requests(run) if c["role"] == role and c["round"] == round)
    return call["request"]["messages"][1]["content"]


@pytest.mark.heavy  # a two-round run
def test_roles_get_each_others_context_and_every_view_counts_the_same(tmp_path, capsys):
    diagnosis = plans.diagnose()
    diagnosis["tool_calls"][0]["arguments"]["diagnosis"]["gaps"][0]["evidence"] = ["calc.ops"]
    replies = [
        diagnosis,
        *plans.migrate(plans.OPS_BUGGY),
        plans.call("write_probe", name="calc_ops", source=plans.PROBE),
        plans.call("submit", summary="probed calc.ops", unchecked=["calc.cli: no entry point yet", "calc.docs"]),
        plans.diagnose(),
        plans.call("edit_file", path="/app/calc/ops.py", old="k + 1", new="k"),
        plans.call("submit", summary="fixed scale"),
        *plans.verify_again(),
    ]
    run = start(tmp_path, replies)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    verifier_1 = _first_prompt(run, "verifier", 1)
    assert "[summary by the Migrator: " in verifier_1 and "```data\nwrote calc\n```" in verifier_1
    assert "```data\n- calc/__init__.py (+" in verifier_1 and "\n- calc/ops.py (+" in verifier_1
    diagnoser_2 = _first_prompt(run, "diagnoser", 2)
    assert "```data\n- port calc.ops: write /app/calc — open: calc.ops not established\n```" in diagnoser_2
    assert "```data\n- calc.cli — no entry point yet\n- calc.docs — no reason given\n```" in diagnoser_2
    assert "# What the previous Verifier reported" in diagnoser_2
    assert "[summary by the Verifier: " in diagnoser_2 and "```data\nprobed calc.ops\n```" in diagnoser_2
    assert "VIOLATED (new) calc.ops" in diagnoser_2 or "VIOLATED calc.ops" in diagnoser_2
    assert re.search(r"distance [\d.e-]+ > tolerance [\d.e-]+ \(noise [\d.e-]+\)", diagnoser_2)
    migrator_2 = _first_prompt(run, "migrator", 2)
    assert "# Evidence after the previous round" in migrator_2 and "calc.ops" in migrator_2.split("# Evidence")[1]
    assert "# Evidence" not in _first_prompt(run, "migrator", 1)
    verifier_2 = _first_prompt(run, "verifier", 2)
    assert "From twin's re-run of the built-in checks and every probe written in earlier rounds" in verifier_2
    assert "[summary by the Migrator: " in verifier_2 and "```data\nfixed scale\n```" in verifier_2
    assert "```data\n- calc/ops.py (+1 -1)\n```" in verifier_2
    assert "Since round 1:" in verifier_2 and "fixed (violated before, established now): calc.ops" in verifier_2
    # one set of counters: the prompt, the live line, summary.md and `twin evidence show`
    header = next(line for line in verifier_2.splitlines() if line.startswith("Evidence after round 2"))
    counts = re.search(r"(\d+) established, (\d+) violated, (\d+) not", header)
    established, violated, unresolved = map(int, counts.groups())
    tally = f"established={established} violated={violated} not_established={unresolved}"
    assert violated == 0 and established >= 1
    live = [line for line in capsys.readouterr().err.splitlines() if "established=" in line]
    assert live and live[-1].endswith(tally)
    round_2 = run.load_state().rounds[1]
    figures = f"{round_2.model_calls} | {round_2.tokens:,}"
    assert f"| 2 | {round_2.commit[:10]} | {figures} | {established} | 0 | {unresolved} |" in run.summary.read_text()
    assert main(["evidence", "show", str(run.root)]) == 0
    shown = capsys.readouterr().out
    assert tally in shown
    assert "Migrator's summary: fixed scale" in shown
    assert "not examined by the Verifier: calc.cli: no entry point yet" in shown
    assert "Verifier's summary: probed calc.ops" in shown and "report:verifier" not in shown
    store = EvidenceStore(run.evidence, create=False)
    try:
        [unchecked] = [r for r in store.records(kind="unchecked") if r.property.id == "unchecked:calc.cli"]
        assert unchecked.outcome.value == "not_established" and unchecked.observations["reason"] == "no entry point yet"
    finally:
        store.close()


@pytest.mark.heavy  # a two-round run, graded
def test_migrate_ends_with_every_rounds_grade_the_final_candidate_and_a_hint(tmp_path, capsys):
    script = plans.write_script(tmp_path / "script.json", plans.twin_fix_in_round_two())
    runs = tmp_path / "a-rather-long-directory-name-so-that-paths-exceed-eighty-columns" / "runs"
    code = main(
        [
            "migrate",
            "--task",
            str(plans.TINY_TASK),
            "--model",
            script,
            "--rounds",
            "2",
            "--runs-dir",
            str(runs),
            "--run-id",
            "demo",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    run_root = runs / "demo"
    assert "  round 1: 0.5000" in lines and "  round 2: 1.0000" in lines
    assert f"final candidate: round 2 — {run_root / 'final'}" in lines
    listed = next(line for line in lines if line.startswith(f"run directory: {run_root} ("))
    assert "summary.md, trajectory.jsonl, evidence.sqlite, grades.json" in listed
    assert all((run_root / name.rstrip("/")).exists() for name in listed.split("(")[1].rstrip(")").split(", "))
    assert lines[-2].startswith("with a real model: twin migrate --task ")
    assert lines[-1].startswith("spent: 10 model calls (round 1: 6, round 2: 4), ")  # what the run spent, last
    assert (run_root / "final" / "calc" / "ops.py").is_file()
    # plain progress lines never break inside a field
    progress = [line for line in captured.err.splitlines() if "tokens=" in line]
    assert progress and all(re.search(r"established=\d+ violated=\d+ not_established=\d+$", line) for line in progress)


def model_call_roles(run: RunDir) -> list[tuple[int, str]]:
    records = [json.loads(line) for line in run.trajectory.read_text().splitlines()]
    return [(r["round"], r["role"]) for r in records if r["type"] == "model_call"]


def test_a_diagnoser_finding_nothing_left_ends_the_run_without_migrator_or_verifier(tmp_path):
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_GOOD), *plans.verify_with_new_probe()]
    replies.append(plans.diagnose(complete=True))  # the script holds no reply for a round-2 Migrator
    run = start(tmp_path, replies, rounds=3, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert [role for round, role in model_call_roles(run) if round == 2] == ["diagnoser"]
    assert "nothing left" in state.stop_reason and state.status == "finished"
    assert [r.done for r in state.rounds] == [["diagnose", "migrate", "verify"], ["diagnose"]]
    assert state.final_round == 1 and len(state.rounds) == 2


def test_complete_with_a_property_not_established_goes_on(tmp_path):
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_BUGGY), *plans.verify_with_new_probe()]
    replies += [plans.diagnose(complete=True), *plans.migrate(plans.OPS_GOOD), *plans.verify_again()]
    run = start(tmp_path, replies, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert [role for round, role in model_call_roles(run) if round == 2].count("verifier") == 1
    assert outcomes(run, "calc.ops")[-1] == (2, "established")


def test_a_round_whose_migrator_changed_nothing_is_not_verified_again(tmp_path):
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_BUGGY), *plans.verify_with_new_probe()]
    replies += [plans.diagnose(), plans.call("submit", summary="changed nothing")]
    run = start(tmp_path, replies, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert "verifier" not in [role for round, role in model_call_roles(run) if round == 2]
    assert state.rounds[1].commit == state.rounds[0].commit
    assert state.rounds[1].evidence_score == state.rounds[0].evidence_score
    assert outcomes(run, "calc.ops") == [(1, "violated")]  # no re-run: the same tree was judged already
    # summary.md's row of round 2 carries round 1's evidence, not a row of zeros
    rows = [line for line in run.summary.read_text().splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2 and rows[0].split("|")[5:8] == rows[1].split("|")[5:8]
    assert rows[0].split("|")[6].strip() == "1"  # calc.ops violated


def diagnose_naming(*probes: str) -> dict:
    reply = plans.diagnose()
    reply["tool_calls"][0]["arguments"]["diagnosis"]["gaps"][0]["probes"] = list(probes)
    return reply


def test_a_round_whose_rerun_shows_every_objective_done_calls_no_verifier(tmp_path):
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_BUGGY)]
    replies += [
        plans.call("write_probe", name="calc_ops", source=plans.PROBE),
        plans.call("submit", summary="probed calc.ops", unchecked=["calc.cli: no entry point yet"]),
    ]
    # round 2 names the violated property (with a description after its id) and the repair shows it
    replies += [diagnose_naming("calc.ops — add and scale match"), *plans.migrate(plans.OPS_GOOD)]
    replies += [plans.diagnose(complete=True)]  # no reply for a round-2 Verifier: the script runs out if one is called
    run = start(tmp_path, replies, rounds=3, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    assert [role for round, role in model_call_roles(run) if round == 2] == ["diagnoser"] + ["migrator"] * 3
    assert outcomes(run, "calc.ops") == [(1, "violated"), (2, "established")]  # re-run by twin, not a model
    assert state.rounds[1].done == ["diagnose", "migrate", "verify"]
    assert state.rounds[1].evidence_score > state.rounds[0].evidence_score
    # round 3's Diagnoser still reads what round 1's Verifier could not examine, then ends the run
    diagnoser_3 = _first_prompt(run, "diagnoser", 3)
    assert "```data\n- calc.cli — no entry point yet\n```" in diagnoser_3
    assert "nothing left" in state.stop_reason and state.final_round == 2
    # ... as round 1's Verifier was told, in its own prompt and its submit tool, before it listed calc.cli
    verifier_1 = next(c for c in _requests(run) if c["role"] == "verifier" and c["round"] == 1)["request"]
    assert "they do\nnot keep the run from stopping" in verifier_1["messages"][0]["content"]
    (submit,) = [t for t in verifier_1["tools"] if t["function"]["name"] == "submit"]
    assert "never hold the run open" in submit["function"]["description"]


def test_a_diagnosis_naming_a_property_no_probe_states_yet_gets_a_verifier(tmp_path):
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_BUGGY), *plans.verify_with_new_probe()]
    replies += [diagnose_naming("calc.ops", "calc.cli"), *plans.migrate(plans.OPS_GOOD), *plans.verify_again()]
    run = start(tmp_path, replies, grade=False)
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert [role for round, role in model_call_roles(run) if round == 2] == ["diagnoser"] + ["migrator"] * 3 + [
        "verifier"
    ]
    assert outcomes(run, "calc.ops")[-1] == (2, "established")


@pytest.mark.parametrize(
    ("entry", "verifier"),
    [("calc/ops.py:9", True), ("a check of scale in words", True), (None, False)],
    ids=["file-line", "words", "ids-only"],
)
def test_a_gap_entry_other_than_an_established_id_costs_a_verifier_as_the_diagnosers_prompt_says(
    tmp_path, entry, verifier
):
    """The stop rule and the Diagnoser's prompt say the same: once the re-run establishes every property, a
    round whose gaps name only established ids gets no Verifier; a file:line or words cost one; the spans
    cited in `sources` (handed to the Migrator) never do."""
    replies = [plans.diagnose(), *plans.migrate(plans.OPS_BUGGY), *plans.verify_with_new_probe()]
    second = diagnose_naming("calc.ops", *([entry] if entry else []))
    second["tool_calls"][0]["arguments"]["diagnosis"]["gaps"][0]["sources"] = ["/source/calc/ops.py:9-11"]
    replies += [second, *plans.migrate(plans.OPS_GOOD), *(plans.verify_again() if verifier else [])]
    run = start(tmp_path, replies, grade=False, sandbox="none")
    run_migration(RunInputs.read(run), SCAFFOLDS)
    assert ("verifier" in [role for round, role in model_call_roles(run) if round == 2]) is verifier
    assert outcomes(run, "calc.ops")[-1] == (2, "established")
    diagnoser = next(c for c in _requests(run) if c["role"] == "diagnoser")["request"]["messages"][0]["content"]
    rule = " ".join(diagnoser.split())
    assert (
        "every entry of every gap's `evidence` and `probes` names one of them by its id, the round ends without a "
        "Verifier. Any other entry there (a file:line, a check in words, a property id no probe states yet) costs "
        "a Verifier's turn." in rule
    )
    assert "`sources` never costs a Verifier." in rule
