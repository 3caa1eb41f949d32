"""The bundled example trajectories replay, start to finish, against the current prompts and tools.

A recording goes stale when a prompt, a tool or the probe-file format changes; the replay
then diverges and says where. `scripts/record_examples.py` records them again.

Every recording replays in CI (no grading: the replay is what goes stale): mlp-train's and
the base scaffold's in the default suite, the longer llama twin replays as `heavy`; one
also replays with numbers from "another machine" (noise floors three times larger, scores
off in their last digits; heavy). Grading every round against the recorded grades is in
the slow suite, except for one bench of the three scaffolds over mlp-train, graded and
reported (heavy).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from harness.bench.run import run_bench
from harness.bench.schema import BenchConfig
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TASKS = REPO / "tasks" / "t2j-mini"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="replays run in the bwrap sandbox")

RECORDINGS = [
    ("mlp-train", "twin", "mlp-train-twin"),
    ("mlp-train", "base", "mlp-train-base"),
    ("llama-lora-sft", "twin", "lora-twin"),
    ("llama-lora-sft", "base", "lora-base"),
    ("llama-paged-serve", "twin", "serve-twin"),
    ("llama-paged-serve", "base", "serve-base"),
    ("mlp-train", "mini-swe-agent", "mlp-train-mini-swe-agent"),
]
# a minute or more each on two cores (./scripts/example.sh replays the first)
HEAVY_REPLAYS = {"mlp-train-twin", "lora-twin", "serve-twin"}
CASES = [pytest.param(task, scaffold, id=name) for task, scaffold, name in RECORDINGS]
REPLAY_CASES = [
    pytest.param(task, scaffold, id=name, marks=[pytest.mark.heavy] if name in HEAVY_REPLAYS else [])
    for task, scaffold, name in RECORDINGS
]


def replay(task: str, scaffold: str, tmp_path: Path, *, grade: bool = False) -> RunDir:
    recording = EXAMPLES / task / f"{scaffold}.jsonl"
    config = RunConfig.build(task=TASKS / task, model=f"replay:{recording}", scaffold=scaffold, rounds=2, grade=grade)
    run = RunDir.create(tmp_path, config, RunState(run_id="replay"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    state = run.load_state()
    # a single agent that submitted with nothing failing on the candidate side is not asked again
    assert state.status == "finished" and state.final_round == (2 if scaffold == "twin" else 1)
    if scaffold != "twin":
        assert state.stop_reason.startswith("round 1: the agent submitted"), state.stop_reason
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    assert len(calls) == sum('"model_call"' in line for line in recording.read_text().splitlines())
    assert all(call["label"].startswith("replayed from") for call in calls)
    if scaffold == "twin":
        # the demonstration's point: round 1's seeded defect is violated, round 2 repairs it
        assert state.rounds[0].evidence_score < state.rounds[1].evidence_score
        # ... with the original's definition the diagnosis cites in the repairing Migrator's task message
        migrator_2 = next(c for c in calls if c["role"] == "migrator" and c["round"] == 2)
        assert "# The original at the spans the diagnosis cites" in migrator_2["request"]["messages"][1]["content"]
    return run


@pytest.mark.parametrize(("task", "scaffold"), REPLAY_CASES)
def test_example_replays_without_divergence(task, scaffold, tmp_path):
    replay(task, scaffold, tmp_path)


@pytest.mark.heavy
def test_an_example_replays_with_the_numbers_of_another_machine(tmp_path, monkeypatch):
    """Every compared output measured as another CPU would: a noise floor three times larger
    (float32 against float64 differs that much between CPUs) and scores off in their last
    digits. The outcomes are the same; only digits move, and the replay still matches."""
    from probes import compare

    measured = compare.compare_leaf

    def on_another_machine(path, measure, ref, cand, noise_ref):
        leaf = measured(path, measure, ref, cand, noise_ref)
        if measure in ("exact", "banded"):
            return leaf
        # a noise of exactly 0 (the float64 run gave the very same values: nothing was rounded, or a
        # second run repeated the first) is 0 on any machine; a measured one moves
        noise = leaf.noise * 3.0 + (1e-12 if leaf.noise else 0.0)
        score = min(1.0, max(0.0, leaf.score - 7e-9))
        return compare.LeafScore(path, measure, score, noise, compare.SPREAD * max(noise, compare.RESOLUTION), leaf.ok)

    monkeypatch.setattr(compare, "compare_leaf", on_another_machine)
    replay("mlp-train", "twin", tmp_path)


def _recorded_prompt(task: str, role: str, round: int) -> str:
    lines = (EXAMPLES / task / "twin.jsonl").read_text().splitlines()
    calls = [json.loads(line) for line in lines if '"model_call"' in line]
    call = next(c for c in calls if c["role"] == role and c["round"] == round)
    return call["request"]["messages"][1]["content"]


@pytest.mark.parametrize("task", ["mlp-train", "llama-lora-sft", "llama-paged-serve"])
def test_the_round_two_diagnoser_sees_every_violated_property_whole_with_its_deciding_numbers(task):
    section = _recorded_prompt(task, "diagnoser", 2).split("# Evidence so far\n")[1].split("\n# ")[0]
    assert "```data\nLocalization after round 1: the divergence starts at " in section
    evidence = section[section.index("\nEvidence after round 1 on candidate commit ") + 1 :]
    blocks = re.split(r"\n(?=- |Established|\[)", evidence)[1:]
    violated = [b for b in blocks if b.startswith(("- VIOLATED", "- REGRESSED"))]
    assert violated
    deciding = re.compile(r"    \S+: \w+ distance \S+ > tolerance \S+ \(noise \S+(, [\w-]+)?\)")  # a zero says why
    for block in violated:
        body = block.splitlines()[1:]
        assert body and all(line.startswith("    ") for line in body), block
        failing = [line for line in body if deciding.fullmatch(line)]
        assert failing or any(line.startswith(("    why: ", "    structure: ")) for line in body), block
        assert not any("distance" in line and not deciding.fullmatch(line) for line in body), block
    # the next Diagnoser also gets what the Verifier could not examine and the Migrator's words
    prompt = _recorded_prompt(task, "diagnoser", 2)
    assert "- training end to end — this demonstration probes the model only" in prompt
    assert "[summary by the Migrator: " in prompt and "```data\nwrote the JAX package\n```" in prompt


@pytest.mark.parametrize("task", ["mlp-train", "llama-lora-sft", "llama-paged-serve"])
def test_round_two_calls_no_verifier_once_the_rerun_probes_show_the_repair(task):
    lines = (EXAMPLES / task / "twin.jsonl").read_text().splitlines()
    calls = [json.loads(line) for line in lines if '"model_call"' in line]
    assert {c["role"] for c in calls if c["round"] == 1} == {"diagnoser", "migrator", "verifier"}
    assert [c["role"] for c in calls if c["round"] == 2] == ["diagnoser", "migrator", "migrator"]
    # the repair's diagnosis names the properties the re-run probes state; writing a probe ran it
    assert re.search(r"verify with: \S+\.\S+(; \S+\.\S+)+\n", _recorded_prompt(task, "migrator", 2))
    assert not any(t["function"]["name"] == "run_probe" for c in calls for t in c["request"]["tools"])


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(("task", "scaffold"), CASES)
def test_example_replays_to_its_recorded_grades(task, scaffold, tmp_path):
    recorded = json.loads((EXAMPLES / task / f"{scaffold}.grades.json").read_text())
    run = replay(task, scaffold, tmp_path, grade=True)
    grades = json.loads(run.grades.read_text())
    got = {str(g["round"]): g["reward"] for g in grades["rounds"]}
    assert got.keys() == recorded.keys()
    for round, reward in recorded.items():
        assert got[round] == pytest.approx(reward, abs=0.02), (round, got, recorded)


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_bench_over_the_bundled_tasks_with_replays_reports_both_scaffolds(tmp_path):
    config = BenchConfig(
        name="bundled",
        tasks=sorted(TASKS / name for name in ("mlp-train", "llama-lora-sft", "llama-paged-serve")),
        models=[f"replay:{EXAMPLES}/{{task}}/{{scaffold}}.jsonl"],
        rounds=2,
        seeds=1,
        jobs=2,
    )
    results = run_bench(config, tmp_path)
    assert len(results.trials) == 6 and all(t.status == "ok" for t in results.trials.values())
    for trial in results.trials.values():
        if trial.scaffold == "twin":  # the twin's round 2 repairs the seeded defect
            assert trial.rewards[2] >= 0.97, trial.trial_id
        else:  # a single agent submitted in round 1, nothing failing: that round is what it delivers
            assert trial.rewards[2] == trial.rewards[1], trial.trial_id
    from harness.bench.directory import BenchDir
    from harness.bench.report import reward_by_round, write_report

    text = write_report(BenchDir(tmp_path / "bundled")).read_text()
    for by_round in reward_by_round(results).values():
        assert f"{by_round[2][0]:.4f} ± {by_round[2][1]:.4f}" in text


REWARD_ROW = re.compile(r"\| (?P<model>[^|]+) \| (?P<scaffold>[^|]+) \| (?P<cells>.+) \| \$\S+ \|")


@pytest.mark.heavy
def test_bench_of_three_scaffolds_on_a_bundled_task_reports_each_at_its_recorded_grades(tmp_path):
    """`twin bench --scaffold twin,base,mini-swe-agent` over the bundled mlp-train, each scaffold
    replaying its own recording (`{scaffold}` in the model string), graded by the task's grader;
    then `twin report`: the three side by side, each at the grades its recording was made with."""
    if importlib.util.find_spec("minisweagent") is None:  # finds it without importing it
        pytest.skip("mini-swe-agent not installed (pip install 'twin-harness[mini]')")
    from harness.bench.directory import BenchDir
    from harness.bench.trials import trial_log
    from harness.cli.app import main

    scaffolds = ["twin", "base", "mini-swe-agent"]
    model = f"replay:{EXAMPLES}/{{task}}/{{scaffold}}.jsonl"
    bench = ["--name", "three", "--benches-dir", str(tmp_path)]
    code = main(
        ["bench", "--tasks", str(TASKS / "mlp-train"), "--model", model, "--scaffold", ",".join(scaffolds)]
        + ["--rounds", "2", "--retry-backoff-s", "0", "--no-report", *bench]
    )
    assert code == 0
    assert main(["report", *bench[1:]]) == 0

    recorded = {s: json.loads((EXAMPLES / "mlp-train" / f"{s}.grades.json").read_text()) for s in scaffolds}
    trials = {t.scaffold: t for t in BenchDir(tmp_path / "three").load().trials.values()}
    assert sorted(trials) == sorted(scaffolds)
    for scaffold, trial in trials.items():
        log = trial_log(tmp_path / "three" / "runs" / trial.trial_id).read_text()
        assert log.count("model: replayed from ") == 1 and f"/{scaffold}.jsonl — not a live model" in log
        assert trial.status == "ok", (trial.trial_id, trial.error, log[-2000:])
        assert trial.model_label.startswith("replayed from") and trial.model_label.endswith(f"{scaffold}.jsonl")
        got = {str(r): reward for r, reward in trial.snapshot_rewards.items()}
        # the tolerance of `test_example_replays_to_its_recorded_grades`: grades recorded on another CPU
        assert got == pytest.approx(recorded[scaffold], abs=0.02), (scaffold, got, recorded[scaffold])

    report = (tmp_path / "three" / "report.md").read_text()
    assert "> Models in this bench are replayed or scripted, not live: replayed from " in report
    rows = {m["scaffold"]: m["cells"].split(" | ") for m in map(REWARD_ROW.fullmatch, report.splitlines()) if m}
    assert sorted(rows) == sorted(scaffolds)
    for scaffold, cells in rows.items():
        means = {str(r): float(cell.split(" ± ")[0]) for r, cell in enumerate(cells, start=1)}
        # a run that stopped after round 1 delivers round 1 with a budget of 2 rounds too
        expected = {str(r): recorded[scaffold].get(str(r), recorded[scaffold]["1"]) for r in (1, 2)}
        assert means == pytest.approx(expected, abs=0.02), (scaffold, cells, recorded[scaffold])
    assert "## Harness − base, paired per task (R=2)" in report
    assert "## Harness − mini-swe-agent, paired per task (R=2)" in report
