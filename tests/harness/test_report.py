from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from harness.bench.directory import BenchDir
from harness.bench.report import paired_deltas, reward_by_round, round_transitions, write_report
from harness.bench.schema import BenchConfig, BenchResults, TrialResult

REWARDS = {  # (task, scaffold, seed) -> rewards by round budget
    ("a", "twin", 0): {1: 0.5, 2: 0.8},
    ("a", "twin", 1): {1: 0.6, 2: 0.9},
    ("b", "twin", 0): {1: 0.7, 2: 0.7},
    ("b", "twin", 1): {1: 0.4, 2: 0.6},
    ("a", "base", 0): {1: 0.5, 2: 0.4},
    ("a", "base", 1): {1: 0.5, 2: 0.5},
    ("b", "base", 0): {1: 0.6, 2: 0.6},
    ("b", "base", 1): {1: 0.3, 2: 0.35},
}


@pytest.fixture
def bench(tmp_path) -> BenchDir:
    config = BenchConfig(name="t", tasks=[Path("a"), Path("b")], models=["m"], rounds=2, seeds=2)
    results = BenchResults(config=config)
    for (task, scaffold, seed), rewards in REWARDS.items():
        trial = TrialResult(
            trial_id=f"{task}-{scaffold}-{seed}",
            task=task,
            model="m",
            scaffold=scaffold,
            seed=seed,
            status="ok",
            rewards=rewards,
            cost_usd=0.1 if scaffold == "twin" else 0.05,
            failures=[{"id": "jit", "kind": "jit", "level": 2}] if scaffold == "base" else [],
        )
        results.trials[trial.trial_id] = trial
    results.trials["infra"] = TrialResult(
        trial_id="infra",
        task="a",
        model="m",
        scaffold="twin",
        seed=2,
        status="infra_failed",
        rewards={1: 0.0, 2: 0.0},
        error="rate limited",
    )
    bench = BenchDir(tmp_path / "t")
    bench.root.mkdir()
    bench.save(results)
    return bench


def test_mean_and_std_over_seeds_of_task_means(bench):
    table = reward_by_round(bench.load())
    seed_means = [np.mean([0.8, 0.7]), np.mean([0.9, 0.6])]
    mean, std, n = table[("m", "twin")][2]
    assert n == 2  # the infrastructure failure is not a seed with reward 0
    assert mean == pytest.approx(np.mean(seed_means))
    assert std == pytest.approx(np.std(seed_means, ddof=1))


def test_paired_deltas_and_bootstrap_interval(bench):
    d = paired_deltas(bench.load(), 2)["m"]
    assert d["deltas"]["a"] == pytest.approx(0.85 - 0.45)
    assert d["deltas"]["b"] == pytest.approx(0.65 - 0.475)
    assert d["ci"][0] <= d["mean"] <= d["ci"][1]
    assert d["ci"][0] >= min(d["deltas"].values()) - 1e-12


def test_round_transitions_use_the_stable_band(bench):
    t = round_transitions(bench.load(), band=0.01)
    assert t[("m", "twin", 1)] == {"improved": 3, "stable": 1}
    assert t[("m", "base", 1)] == {"regressed": 1, "stable": 2, "improved": 1}


def test_report_numbers_match_the_results_and_plots_exist(bench):
    path = write_report(bench)
    text = path.read_text()
    table = reward_by_round(bench.load())
    mean, std, _ = table[("m", "twin")][2]
    assert f"{mean:.4f} ± {std:.4f}" in text
    assert re.search(r"\| m \| base \| 1→2 \| 1 \| 2 \| 1 \|", text)
    assert "| base | jit | 2 | 4 |" in text
    assert "infra: infra_failed (rate limited)" in text
    assert re.search(r"over 2 tasks: shown$", text, re.MULTILINE)  # both tasks' deltas are above 0
    for png in ("rewards_by_round", "paired_deltas", "round_transitions", "reward_vs_cost", "failures"):
        assert (bench.root / f"{png}.png").stat().st_size > 1000


def test_a_failed_trial_leaves_its_task_out_of_every_configurations_mean_and_says_so(bench):
    results = bench.load()
    results.trials["a-twin-1"] = results.trials["a-twin-1"].model_copy(
        update={"status": "infra_failed", "error": "5xx"}
    )
    bench.save(results)
    table = reward_by_round(bench.load())
    # seed 1 has only task b for both scaffolds now: like with like
    assert table[("m", "twin")][2][0] == pytest.approx(np.mean([np.mean([0.8, 0.7]), 0.6]))
    assert table[("m", "base")][2][0] == pytest.approx(np.mean([np.mean([0.4, 0.6]), 0.35]))
    text = write_report(bench).read_text()
    assert (
        "Means are over the 3 (task, seed) pairs on which every configuration has a scored trial (6 trials); "
        "1 scored trial(s) left out of the means" in text
    )
    assert "## Scored trials left out of the means (1)" in text
    assert "- a-base-1: another configuration has no scored trial on task a, seed 1" in text
    assert "## Trials left out of every number (2)" in text and "a-twin-1: infra_failed (5xx)" in text


def test_rounds_are_plotted_on_whole_numbers(bench, monkeypatch):
    import matplotlib.axes

    ticks = []
    original = matplotlib.axes.Axes.set_xticks
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "set_xticks",
        lambda self, t, *a, **k: (ticks.append(list(t)), original(self, t, *a, **k))[1],
    )
    write_report(bench)
    assert [1, 2] in ticks
