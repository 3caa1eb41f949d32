"""The anytime sections of `twin report`: reward at shares of the budget, paired differences, round ablation, curves.

The numbers come from `harness.bench.anytime`; this module renders them as markdown and
draws the reward–cost curves (matplotlib, Agg). Every table and figure states its n.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.bench import anytime
from harness.bench.schema import BenchResults, TrialResult


def anytime_lines(root: Path, results: BenchResults, trials: Sequence[TrialResult], axis: str) -> list[str]:
    """The report's anytime sections over `trials` (the compared, scored ones), plots written into `root`."""
    words = anytime.AXIS_WORDS[axis]
    with_curve = [t for t in trials if t.curve]
    lines = [f"## Reward at shares of the budget ({words})", ""]
    if not with_curve:
        return lines + [
            "No trial has graded snapshots (a bench run with --no-grade-snapshots, or from before snapshots).",
            "",
            *_ablation_lines(trials, results.config.rounds),
        ]
    figures = anytime.metrics(results, with_curve, axis)
    budget = anytime.budgets(results, with_curve, axis)
    limit = getattr(results.config.budget, anytime.AXIS_LIMIT[axis])
    source = "the bench's per-trial budget" if limit else "per task, the most any of its trials spent"
    lines += [
        f"B = {source}: " + ", ".join(f"{task} {_amount(b, axis)}" for task, b in sorted(budget.items())) + ". "
        "Reward of the last graded snapshot within each share (0 before a trial's first); area under the "
        "reward–cost curve over [0, B] divided by B; cost to reach the trial's own best reward (mean over trials).",
        "",
        "| model | scaffold | n | "
        + " | ".join(f"{f:.0%} of B" for f in anytime.FRACTIONS)
        + f" | area | {words} to own best |",
        "|---|---|---|" + "---|" * len(anytime.FRACTIONS) + "---|---|",
    ]
    by_config: dict[tuple[str, str], list[anytime.TrialMetrics]] = defaultdict(list)
    for trial in with_curve:
        by_config[(trial.model, trial.scaffold)].append(figures[trial.trial_id])
    for (model, scaffold), group in sorted(by_config.items()):
        at = [float(np.mean([m.at[i] for m in group])) for i in range(len(anytime.FRACTIONS))]
        costs = [m.cost_to_best for m in group if m.cost_to_best is not None]
        cost = _amount(float(np.mean(costs)), axis) if costs else "-"
        lines.append(
            f"| {model} | {scaffold} | {len(group)} | "
            + " | ".join(f"{v:.4f}" for v in at)
            + f" | {np.mean([m.auc for m in group]):.4f} | {cost} |"
        )
    lines += ["", *_curve_plots(root, with_curve, budget, axis), ""]
    lines += _paired_lines(root, results, with_curve, figures, axis)
    lines += _ablation_lines(trials, results.config.rounds)
    return lines


def _paired_lines(
    root: Path, results: BenchResults, trials: Sequence[TrialResult], figures: dict, axis: str
) -> list[str]:
    lines = [
        "## Paired differences between scaffolds (per task × seed, bootstrap 95% intervals)",
        "",
        "A difference whose interval spans 0 is not shown by this bench.",
        "",
    ]
    found: dict[tuple[str, str], dict[str, anytime.Interval]] = {}
    for model in sorted({t.model for t in trials}):
        for other in [s for s in results.config.scaffolds if s != "twin"]:
            diffs = anytime.paired(trials, figures, model, other)
            if not diffs:
                lines.append(f"- {model}: no task × seed has both twin and {other} with a curve")
                continue
            found[(model, other)] = diffs
            lines.append(f"- twin − {other} · {model}:")
            lines += [f"  - {name}: {interval.text()}" for name, interval in diffs.items()]
    if found:
        lines += ["", f"![paired differences]({_paired_plot(root, found, axis)})"]
    return lines + [""]


def _ablation_lines(trials: Sequence[TrialResult], rounds: int) -> list[str]:
    lines = ["## Round ablation (twin with r rounds − twin with 1, per task × seed, bootstrap 95% intervals)", ""]
    any_found = False
    for model in sorted({t.model for t in trials}):
        for r, interval in anytime.round_ablation(trials, model, rounds).items():
            any_found = True
            lines.append(f"- {model}, R={r} − R=1: {interval.text()}")
    if not any_found:
        lines.append("No twin trial has graded rounds to compare (one round, or no twin trials).")
    return lines + [""]


def _amount(value: float, axis: str) -> str:
    if axis == "usd":
        return f"${value:.4f}"
    if axis == "wall_s":
        return f"{value:.1f} s"
    return f"{value:,.0f}"


def _step(curve, axis: str, xs: np.ndarray) -> np.ndarray:
    return np.array([anytime.reward_at(curve, x, axis) for x in xs])


def _curve_plots(root: Path, trials: Sequence[TrialResult], budget: dict[str, float], axis: str) -> list[str]:
    """One figure per task: every trial's step curve (thin) and each scaffold's mean (thick), on one axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = []
    for task in sorted({t.task for t in trials}):
        group = [t for t in trials if t.task == task]
        xs = np.linspace(0.0, budget[task] or 1.0, 201)
        configs = sorted({(t.model, t.scaffold) for t in group})
        fig, ax = plt.subplots(figsize=(6, 4))
        counts = []
        for i, (model, scaffold) in enumerate(configs):
            mine = [t for t in group if (t.model, t.scaffold) == (model, scaffold)]
            counts.append(f"{scaffold} {len(mine)}")
            label = scaffold if len({m for m, _ in configs}) == 1 else f"{scaffold} · {model[:24]}"
            for trial in mine:
                ax.step(xs, _step(trial.curve, axis, xs), where="post", color=f"C{i}", alpha=0.3, linewidth=0.8)
            mean = np.mean([_step(t.curve, axis, xs) for t in mine], axis=0)
            ax.step(xs, mean, where="post", color=f"C{i}", linewidth=2.0, label=f"{label} (mean of {len(mine)})")
        ax.set(
            xlabel=anytime.AXIS_WORDS[axis],
            ylabel="reward",
            ylim=(-0.02, 1.05),
            title=f"{task}: reward over {anytime.AXIS_WORDS[axis]} (n = {', '.join(counts)} trials)",
        )
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
        name = _save(fig, root / f"curve_{re.sub(r'[^A-Za-z0-9_.-]+', '-', task)}.png")
        lines.append(f"![{task}: reward over {anytime.AXIS_WORDS[axis]}]({name})")
    return lines


def _paired_plot(root: Path, found: dict[tuple[str, str], dict[str, anytime.Interval]], axis: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(next(iter(found.values())))
    width = 0.8 / len(found)
    for i, ((model, other), diffs) in enumerate(sorted(found.items())):
        xs = np.arange(len(names)) + i * width
        means = np.array([diffs[n].mean for n in names])
        errors = np.array(
            [[diffs[n].mean - diffs[n].low for n in names], [diffs[n].high - diffs[n].mean for n in names]]
        )
        n = next(iter(diffs.values())).n
        ax.errorbar(xs, means, yerr=errors, fmt="o", capsize=4, label=f"twin − {other} · {model[:20]} (n = {n})")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(names)) + width * (len(found) - 1) / 2)
    ax.set_xticklabels([n.replace("reward at ", "") for n in names], fontsize=7)
    ax.set(ylabel="difference", title=f"Paired differences over {anytime.AXIS_WORDS[axis]} (mean, 95% bootstrap)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return _save(fig, root / "paired_differences.png")


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
