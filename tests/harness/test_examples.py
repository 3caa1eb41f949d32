"""The bundled example trajectories still replay against the current prompts and tools.

A recording goes stale when a prompt, a tool or the probe-file format changes; the replay
then diverges and says where. `scripts/record_examples.py` records them again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.bench import BenchConfig, run_bench
from harness.commands.migrate import run_migration
from harness.run import RunConfig, RunDir

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TASKS = REPO / "tasks" / "t2j-mini"

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="replays run in the bwrap sandbox")

CASES = [
    pytest.param("mlp-train", "twin", id="mlp-train-twin"),
    pytest.param("mlp-train", "base", id="mlp-train-base", marks=pytest.mark.slow),
    pytest.param("mlp-train", "mini-swe-agent", id="mlp-train-mini-swe-agent"),
    pytest.param("llama-lora-sft", "twin", id="lora-twin", marks=pytest.mark.slow),
    pytest.param("llama-lora-sft", "base", id="lora-base", marks=pytest.mark.slow),
    pytest.param("llama-paged-serve", "twin", id="serve-twin", marks=pytest.mark.slow),
    pytest.param("llama-paged-serve", "base", id="serve-base", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("task", "scaffold"), CASES)
def test_example_replays_without_divergence(task, scaffold, tmp_path):
    recording = EXAMPLES / task / f"{scaffold}.jsonl"
    config = RunConfig.build(task=TASKS / task, model=f"replay:{recording}", scaffold=scaffold, rounds=2, grade=False)
    run = RunDir.create(tmp_path, config, "replay")
    run_migration(run)
    state = run.load_state()
    assert state.status == "finished" and state.final_round == 2
    calls = [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]
    assert len(calls) == sum('"model_call"' in line for line in recording.read_text().splitlines())
    assert all(call["label"].startswith("replayed from") for call in calls)
    if scaffold == "twin":
        # the demonstration's point: round 1's seeded defect is violated, round 2 repairs it
        assert state.rounds[0].evidence_score < state.rounds[1].evidence_score


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
        assert trial.rewards[2] >= 0.97, trial.trial_id
    from harness.bench import BenchDir
    from harness.report import reward_by_round, write_report

    text = write_report(BenchDir(tmp_path / "bundled")).read_text()
    for by_round in reward_by_round(results).values():
        assert f"{by_round[2][0]:.4f} ± {by_round[2][1]:.4f}" in text
