"""What each scaffold had at each share of the budget: the anytime part of `twin report`.

Every trial of a bench runs under the same budget numbers and snapshots its candidate
while it works; its graded snapshots are its reward as a step curve over what it spent
(`TrialResult.curve`). From those curves, per (model, scaffold):

- the reward at 25/50/75/100% of the budget `B` (the reward of the last snapshot taken
  with at most that much spent; before a trial's first graded snapshot nothing was
  delivered, counted as 0);
- the area under the reward–cost curve over [0, B], divided by B (1.0: full reward from
  the first token on);
- the cost to reach its own best reward (the spending of its first snapshot at its best).

`B` is the bench's per-trial budget on the report's axis where it has one; else, per
task, the most any scored trial of that task spent (every scaffold of a task is read
against the same B). Paired differences are taken per task × seed between twin and each
other scaffold, with bootstrap 95% intervals across those pairs (numpy, fixed seed), and
the round ablation is read off twin's per-round grades the same way. A difference whose
interval spans 0 is said to be not shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.bench.schema import BenchResults, CurvePoint, TrialResult

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0
AXIS_LIMIT = {"tokens": "max_tokens", "usd": "max_usd", "calls": "max_calls", "wall_s": "max_wall_s"}
AXIS_WORDS = {"tokens": "tokens", "usd": "dollars", "calls": "model calls", "wall_s": "wall seconds"}


def reward_at(curve: Sequence[CurvePoint], spent: float, axis: str) -> float:
    """The step curve's reward with `spent` spent on `axis`: the last point at or below it (0 before the first)."""
    reward = 0.0
    for point in sorted(curve, key=lambda p: getattr(p, axis)):
        if getattr(point, axis) > spent:
            break
        reward = point.reward
    return reward


def area(curve: Sequence[CurvePoint], budget: float, axis: str) -> float:
    """The area under the step curve over [0, budget], divided by `budget` (in [0, 1] for rewards in [0, 1])."""
    if budget <= 0:
        return 0.0
    total, reward, last = 0.0, 0.0, 0.0
    for point in sorted(curve, key=lambda p: getattr(p, axis)):
        x = min(getattr(point, axis), budget)
        total += reward * (x - last)
        reward, last = point.reward, x
    total += reward * (budget - last)
    return total / budget


def cost_to_best(curve: Sequence[CurvePoint], axis: str) -> float | None:
    """What a trial had spent when it first reached its own best reward (None: no graded snapshot)."""
    if not curve:
        return None
    best = max(p.reward for p in curve)
    return min(getattr(p, axis) for p in curve if p.reward == best)


def budgets(results: BenchResults, trials: Sequence[TrialResult], axis: str) -> dict[str, float]:
    """Task -> the budget B the report reads the curves against (see the module docstring)."""
    limit = getattr(results.config.budget, AXIS_LIMIT[axis])
    spent: dict[str, float] = defaultdict(float)
    for trial in trials:
        spent[trial.task] = max(spent[trial.task], *(getattr(p, axis) for p in trial.curve), 0.0)
    return {task: float(limit) if limit else value for task, value in spent.items()}


@dataclass(frozen=True)
class Interval:
    """A mean over n paired values with its bootstrap 95% interval."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def shown(self) -> bool:
        """A difference is shown only when its interval leaves 0 out."""
        return self.low > 0 or self.high < 0

    def text(self) -> str:
        verdict = "shown" if self.shown else "not shown (the interval spans 0)"
        return f"{self.mean:+.4f} [{self.low:+.4f}, {self.high:+.4f}], n = {self.n}: {verdict}"


def bootstrap(values: Sequence[float]) -> Interval:
    """Mean of `values` with a percentile bootstrap 95% interval (fixed seed: the same report every time)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = rng.choice(data, size=(BOOTSTRAP_SAMPLES, data.size), replace=True).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(data.mean()), float(low), float(high), int(data.size))


@dataclass(frozen=True)
class TrialMetrics:
    """One trial's anytime figures."""

    at: tuple[float, ...]
    """Reward at each of `FRACTIONS` of its task's budget."""
    auc: float
    cost_to_best: float | None


def trial_metrics(trial: TrialResult, budget: float, axis: str) -> TrialMetrics:
    return TrialMetrics(
        at=tuple(reward_at(trial.curve, f * budget, axis) for f in FRACTIONS),
        auc=area(trial.curve, budget, axis),
        cost_to_best=cost_to_best(trial.curve, axis),
    )


def metrics(results: BenchResults, trials: Sequence[TrialResult], axis: str) -> dict[str, TrialMetrics]:
    """trial id -> its figures, for the trials that have a curve."""
    b = budgets(results, trials, axis)
    return {t.trial_id: trial_metrics(t, b[t.task], axis) for t in trials if t.curve}


def paired(
    trials: Sequence[TrialResult], figures: dict[str, TrialMetrics], model: str, other: str
) -> dict[str, Interval]:
    """twin − `other` per task × seed (trials of `model` with a curve on both sides): reward at each share
    of the budget and the area, each a bootstrap interval over the pairs."""
    by = {
        (t.task, t.seed, t.scaffold): figures[t.trial_id] for t in trials if t.model == model and t.trial_id in figures
    }
    pairs = [
        (by[key], by[(key[0], key[1], other)]) for key in sorted(by) if key[2] == "twin" and (*key[:2], other) in by
    ]
    if not pairs:
        return {}
    out = {f"reward at {f:.0%}": bootstrap([a.at[i] - b.at[i] for a, b in pairs]) for i, f in enumerate(FRACTIONS)}
    out["area under the curve"] = bootstrap([a.auc - b.auc for a, b in pairs])
    return out


def round_ablation(trials: Sequence[TrialResult], model: str, rounds: int) -> dict[int, Interval]:
    """Twin with a budget of r rounds against 1 round, per task × seed, for r = 2..R (its per-round grades)."""
    twin = [t for t in trials if t.model == model and t.scaffold == "twin"]
    out = {}
    for r in range(2, rounds + 1):
        diffs = [
            t.rewards[r] - t.rewards[1] for t in twin if t.rewards.get(r) is not None and t.rewards.get(1) is not None
        ]
        if diffs:
            out[r] = bootstrap(diffs)
    return out
