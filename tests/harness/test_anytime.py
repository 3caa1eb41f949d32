"""The anytime figures of `twin report` on a fixture with known reward curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bench import anytime
from harness.bench.directory import BenchDir
from harness.bench.report import write_report
from harness.bench.schema import BenchConfig, BenchError, BenchResults, CurvePoint, TrialResult
from harness.models.budget import Budget


def point(tokens: int, reward: float) -> CurvePoint:
    return CurvePoint(calls=tokens // 100, tokens=tokens, usd=tokens / 1e5, wall_s=tokens / 10, reward=reward)


TWIN = [point(200, 0.5), point(600, 1.0)]
"""Under B = 1000 tokens: 0.5 at 25% and 50%, 1.0 at 75% and 100%; area (0.5·400 + 1.0·400)/1000 = 0.6; best at 600."""
BASE = [point(400, 0.5), point(900, 0.5)]
"""0 at 25%, 0.5 after; area 0.5·600/1000 = 0.3; best (0.5) first at 400."""


def results(budget: Budget | None = None, curves: dict | None = None) -> BenchResults:
    config = BenchConfig(
        name="t", tasks=[Path("a"), Path("b")], models=["m"], rounds=2, seeds=2, budget=budget or Budget()
    )
    out = BenchResults(config=config)
    for task in ("a", "b"):
        for seed in (0, 1):
            for scaffold, curve in (curves or {"twin": TWIN, "base": BASE}).items():
                trial = TrialResult(
                    trial_id=f"{task}-{scaffold}-{seed}",
                    task=task,
                    model="m",
                    scaffold=scaffold,
                    seed=seed,
                    status="ok",
                    rewards={1: 0.5, 2: 1.0} if scaffold == "twin" else {1: 0.5, 2: 0.5},
                    curve=curve,
                )
                out.trials[trial.trial_id] = trial
    return out


def test_reward_at_area_and_cost_to_best_of_a_known_curve():
    assert [anytime.reward_at(TWIN, x, "tokens") for x in (0, 199, 200, 599, 600, 5000)] == [0, 0, 0.5, 0.5, 1, 1]
    assert anytime.area(TWIN, 1000, "tokens") == pytest.approx(0.6)
    assert anytime.area(BASE, 1000, "tokens") == pytest.approx(0.3)
    assert anytime.area(TWIN, 400, "tokens") == pytest.approx(0.5 * 200 / 400)  # cut at the budget
    assert anytime.cost_to_best(TWIN, "tokens") == 600
    assert anytime.cost_to_best(BASE, "tokens") == 400
    assert anytime.cost_to_best([], "tokens") is None
    assert anytime.reward_at(TWIN, 6, "calls") == 1.0  # any axis: 600 tokens are 6 calls here


def test_the_budget_is_the_benchs_own_or_else_the_most_a_task_spent():
    trials = list(results().trials.values())
    assert anytime.budgets(results(), trials, "tokens") == {"a": 900.0, "b": 900.0}
    assert anytime.budgets(results(Budget(max_tokens=1000)), trials, "tokens") == {"a": 1000.0, "b": 1000.0}


def test_paired_differences_per_task_and_seed_with_intervals():
    bench = results(Budget(max_tokens=1000))
    trials = list(bench.trials.values())
    figures = anytime.metrics(bench, trials, "tokens")
    diffs = anytime.paired(trials, figures, "m", "base")
    assert diffs["reward at 25%"].mean == pytest.approx(0.5) and diffs["reward at 25%"].shown
    assert diffs["reward at 50%"].mean == pytest.approx(0.0) and not diffs["reward at 50%"].shown
    assert diffs["area under the curve"].mean == pytest.approx(0.3)
    assert all(d.n == 4 for d in diffs.values())  # 2 tasks × 2 seeds


def test_a_bootstrap_interval_holds_its_mean_and_is_the_same_every_time():
    values = [0.1, -0.2, 0.4, 0.05, 0.3, -0.1]
    interval = anytime.bootstrap(values)
    assert interval.low <= interval.mean <= interval.high
    assert interval == anytime.bootstrap(values)
    assert interval.mean == pytest.approx(sum(values) / len(values))
    assert not interval.shown and "not shown (the interval spans 0)" in interval.text()
    assert anytime.bootstrap([0.2, 0.3, 0.25]).shown
    with pytest.raises(ValueError):
        anytime.bootstrap([])


def test_the_round_ablation_reads_twins_round_grades():
    trials = list(results().trials.values())
    (r2,) = anytime.round_ablation(trials, "m", 2).values()
    assert r2.mean == pytest.approx(0.5) and r2.n == 4 and r2.shown


def test_the_report_renders_the_table_the_differences_and_the_curves(tmp_path):
    bench = BenchDir(tmp_path / "t")
    bench.root.mkdir()
    bench.save(results(Budget(max_tokens=1000)))
    text = write_report(bench).read_text()
    assert "| m | twin | 4 | 0.5000 | 0.5000 | 1.0000 | 1.0000 | 0.6000 | 600 |" in text
    assert "| m | base | 4 | 0.0000 | 0.5000 | 0.5000 | 0.5000 | 0.3000 | 400 |" in text
    assert "B = the bench's per-trial budget: a 1,000, b 1,000" in text
    assert "reward at 50%: +0.0000 [+0.0000, +0.0000], n = 4: not shown (the interval spans 0)" in text
    assert "area under the curve: +0.3000 [+0.3000, +0.3000], n = 4: shown" in text
    assert "- m, R=2 − R=1: +0.5000 [+0.5000, +0.5000], n = 4: shown" in text
    for name in ("curve_a.png", "curve_b.png", "paired_differences.png"):
        assert (bench.root / name).stat().st_size > 0 and f"]({name})" in text
    calls = write_report(bench, axis="calls").read_text()
    assert "## Reward at shares of the budget (model calls)" in calls
    assert "B = per task, the most any of its trials spent: a 9, b 9" in calls  # no call budget: the most spent
    with pytest.raises(BenchError, match="unknown axis"):
        write_report(bench, axis="seconds")


def test_a_bench_without_curves_says_so(tmp_path):
    bench = BenchDir(tmp_path / "t")
    bench.root.mkdir()
    bench.save(results(curves={"twin": [], "base": []}))
    text = write_report(bench).read_text()
    assert "No trial has graded snapshots" in text
    assert "R=2 − R=1" in text  # the round ablation needs no curve


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_a_scripted_bench_over_two_bundled_tasks_writes_curves_and_the_report(tmp_path):
    """twin and base, two bundled tasks, two seeds, each run's snapshots graded by the task's grader;
    the replies are the scripted demonstrations of `scripts/record_examples.py` (labelled scripted)."""
    import json
    import shutil
    import sys

    from harness.bench.run import run_bench

    if shutil.which("bwrap") is None:
        pytest.skip("trials run in the bwrap sandbox")
    repo = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(repo / "scripts"))
    import record_examples

    tasks = ["mlp-train", "llama-paged-serve"]
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for task in tasks:
        for scaffold in ("twin", "base"):
            (scripts / f"{task}-{scaffold}.json").write_text(json.dumps(record_examples.PLANS[scaffold](task)))
    config = BenchConfig(
        name="scripted",
        tasks=[repo / "tasks" / "t2j-mini" / task for task in tasks],
        models=[f"scripted:{scripts}/{{task}}-{{scaffold}}.json"],
        rounds=2,
        seeds=2,
        jobs=2,
        snapshot_every=2,
        budget=Budget(max_calls=40),
        retry_backoff_s=0,
    )
    results = run_bench(config, tmp_path)
    assert len(results.trials) == 8
    for trial in results.trials.values():
        assert trial.status == "ok" and trial.model_label == "scripted", (trial.trial_id, trial.error)
        assert len(trial.curve) >= 3, trial.trial_id
    text = write_report(BenchDir(tmp_path / "scripted"), axis="calls").read_text()
    assert "> Models in this bench are replayed or scripted, not live: scripted" in text
    assert "B = the bench's per-trial budget: llama-paged-serve 40, mlp-train 40" in text
    assert "- twin − base · " in text and "n = 4" in text
    for task in tasks:
        assert (tmp_path / "scripted" / f"curve_{task}.png").is_file()
