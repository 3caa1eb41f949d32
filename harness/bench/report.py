"""`twin report BENCH`: a markdown report with PNG plots from a bench's `results.json`.

Analyses as in 002 §5: mean reward ± sample std over seeds per configuration and
per round budget; paired per-task deltas harness − base with a bootstrap
confidence interval; tasks improved / stable / regressed from round r to r+1;
reward against dollars; failures by property kind and level for each scaffold.
Trials that failed for infrastructure reasons are listed and left out of every
number (never scored as 0). Means compare like with like: the reward table and the
costs average over the (task, seed) pairs on which every configuration has a scored
trial; a scored trial whose pair lacks another configuration's is listed and counted
as left out of the means, never silently averaged over fewer tasks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from ground.untrusted_io import write_text_atomic
from harness.bench.anytime import AXIS_WORDS
from harness.bench.anytime_report import anytime_lines
from harness.bench.directory import BenchDir
from harness.bench.schema import BenchError, BenchResults, TrialResult

BOOTSTRAP_SAMPLES = 10_000


def scored(results: BenchResults) -> list[TrialResult]:
    return [t for t in results.trials.values() if t.status == "ok"]


def config_key(trial: TrialResult) -> tuple[str, str]:
    return trial.model, trial.scaffold


def compared(results: BenchResults) -> tuple[list[TrialResult], list[TrialResult]]:
    """(scored trials in the means, scored trials left out of them).

    A scored trial is in the means when every configuration of the bench (model ×
    scaffold, as its trials name them) has a scored trial on the same task and seed.
    """
    configs = {config_key(t) for t in results.trials.values()}
    have: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
    for trial in scored(results):
        have[(trial.task, trial.seed)].add(config_key(trial))
    inside, outside = [], []
    for trial in scored(results):
        (inside if have[(trial.task, trial.seed)] >= configs else outside).append(trial)
    return inside, outside


def reward_by_round(results: BenchResults) -> dict[tuple[str, str], dict[int, tuple[float, float, int]]]:
    """(model, scaffold) -> round budget -> (mean over seeds, sample std over seeds, seeds).

    Each seed's value is the mean over tasks of that seed's trials, over the trials
    `compared` keeps: every configuration is averaged over the same tasks.
    """
    per_seed: dict[tuple[str, str], dict[int, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for trial in compared(results)[0]:
        for r, reward in trial.rewards.items():
            if reward is not None and int(r) <= results.config.rounds:  # a single agent may have run more
                per_seed[config_key(trial)][int(r)][trial.seed].append(reward)
    table: dict[tuple[str, str], dict[int, tuple[float, float, int]]] = {}
    for key, rounds in per_seed.items():
        table[key] = {}
        for r, seeds in sorted(rounds.items()):
            values = np.array([np.mean(v) for v in seeds.values()])
            std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            table[key][r] = (float(values.mean()), std, len(values))
    return table


def paired_deltas(results: BenchResults, rounds: int, baseline: str = "base") -> dict[str, dict]:
    """Per model: per-task mean(twin) − mean(baseline) at `rounds`, with a 95% bootstrap CI of the mean."""
    by: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for trial in scored(results):
        reward = trial.rewards.get(rounds)
        if reward is not None:
            by[(trial.model, trial.task, trial.scaffold)].append(reward)
    out = {}
    rng = np.random.default_rng(0)
    for model in sorted({m for m, _, _ in by}):
        tasks = sorted({t for m, t, _ in by if m == model})
        deltas = {
            task: float(np.mean(by[(model, task, "twin")]) - np.mean(by[(model, task, baseline)]))
            for task in tasks
            if by.get((model, task, "twin")) and by.get((model, task, baseline))
        }
        if not deltas:
            continue
        values = np.array(list(deltas.values()))
        samples = rng.choice(values, size=(BOOTSTRAP_SAMPLES, len(values)), replace=True).mean(axis=1)
        low, high = np.percentile(samples, [2.5, 97.5])
        out[model] = {"deltas": deltas, "mean": float(values.mean()), "ci": (float(low), float(high))}
    return out


def round_transitions(results: BenchResults, band: float) -> dict[tuple[str, str, int], Counter]:
    """(model, scaffold, r) -> counts of trials improved / stable / regressed from r to r+1."""
    counts: dict[tuple[str, str, int], Counter] = defaultdict(Counter)
    for trial in scored(results):
        for r in sorted(r for r in trial.rewards if r <= results.config.rounds)[:-1]:
            a, b = trial.rewards[r], trial.rewards.get(r + 1)
            if a is None or b is None:
                continue
            delta = b - a
            label = "improved" if delta > band else "regressed" if delta < -band else "stable"
            counts[(trial.model, trial.scaffold, int(r))][label] += 1
    return counts


def failure_counts(results: BenchResults) -> dict[str, Counter]:
    """scaffold -> Counter of (kind, level) of violated post-run properties over scored trials."""
    out: dict[str, Counter] = defaultdict(Counter)
    for trial in scored(results):
        for failure in trial.failures:
            out[trial.scaffold][(failure["kind"], int(failure["level"]))] += 1
    return out


def write_report(bench: BenchDir, *, band: float = 0.01, axis: str = "tokens") -> Path:
    """Write `report.md` and the plots into the bench directory; return the report's path.

    Args:
        axis: what the reward curves are read over: tokens, usd, calls or wall_s (`bench.anytime`).

    Raises:
        BenchError: an unknown axis.
    """
    if axis not in AXIS_WORDS:
        raise BenchError(f"unknown axis {axis!r}: choose from {', '.join(AXIS_WORDS)}")
    results = bench.load()
    rounds = results.config.rounds
    table = reward_by_round(results)
    deltas = paired_deltas(results, rounds)
    transitions = round_transitions(results, band)
    failures = failure_counts(results)
    plots = _plots(bench.root, results, table, deltas, transitions, failures)

    lines = [f"# twin bench `{results.config.name}`", ""]
    labels = sorted({t.model_label for t in results.trials.values() if t.model_label})
    if any(label.startswith(("replayed", "scripted")) for label in labels):
        lines += ["> Models in this bench are replayed or scripted, not live: " + "; ".join(labels), ""]
    resume = "the same `twin bench` command resumes it"
    if results.status == "interrupted":
        lines += [f"> The bench was {results.stop_reason} before all its trials ended; {resume}.", ""]
    elif results.status == "running" and bench.held_now():
        lines += ["> The bench is still running: this report holds the trials ended so far.", ""]
    elif results.status == "running":  # its process ended without saving a stop: killed (SIGKILL, the machine)
        lines += [f"> The bench's process ended before its trials did, without saving why (killed); {resume}.", ""]
    status = Counter(t.status for t in results.trials.values())
    lines += [
        f"Tasks: {len(results.config.tasks)} · models: {len(results.config.models)} · scaffolds: "
        f"{', '.join(results.config.scaffolds)} · rounds: {rounds} · seeds: {results.config.seeds}",
        f"Trials: {dict(sorted(status.items()))}",
        "",
        "## Reward by configuration and round budget (mean ± sample std over seeds)",
        "",
        "| model | scaffold | " + " | ".join(f"R={r}" for r in range(1, rounds + 1)) + " | cost/trial |",
        "|---|---|" + "---|" * rounds + "---|",
    ]
    cost = _mean_cost(results)
    inside, outside = compared(results)
    pairs = sorted({(t.task, t.seed) for t in inside})
    lines[-2:-2] = [
        f"Means are over the {len(pairs)} (task, seed) pairs on which every configuration has a scored "
        f"trial ({len(inside)} trials); {len(outside)} scored trial(s) left out of the means "
        "(listed at the end), and failed trials are never scored.",
        "",
    ]
    for (model, scaffold), by_round in sorted(table.items()):
        cells = [f"{by_round[r][0]:.4f} ± {by_round[r][1]:.4f}" if r in by_round else "-" for r in range(1, rounds + 1)]
        lines.append(f"| {model} | {scaffold} | " + " | ".join(cells) + f" | ${cost[(model, scaffold)]:.4f} |")
    lines += ["", f"![reward by round]({plots['rounds']})", "", "## Model calls and tokens per trial (means)", ""]
    lines += spending_lines(inside)
    lines += ["", *anytime_lines(bench.root, results, inside, axis)]
    lines += ["", f"## Harness − base, paired per task (R={rounds})", ""]
    if deltas:
        lines += _delta_lines(deltas)
        lines += ["", f"![paired deltas]({plots['deltas']})"]
    else:
        lines.append("No task has both scaffolds scored.")
    for other in [s for s in results.config.scaffolds if s not in ("twin", "base")]:
        other_deltas = paired_deltas(results, rounds, baseline=other)
        lines += ["", f"## Harness − {other}, paired per task (R={rounds})", ""]
        lines += _delta_lines(other_deltas) if other_deltas else [f"No task has both twin and {other} scored."]
    lines += ["", f"## Round-to-round changes (stable = |Δ| ≤ {band})", ""]
    lines += ["| model | scaffold | rounds | improved | stable | regressed |", "|---|---|---|---|---|---|"]
    for (model, scaffold, r), c in sorted(transitions.items()):
        lines.append(f"| {model} | {scaffold} | {r}→{r + 1} | {c['improved']} | {c['stable']} | {c['regressed']} |")
    lines += ["", f"![round transitions]({plots['transitions']})", "", "## Reward against cost", ""]
    lines += [f"![reward vs cost]({plots['cost']})", "", "## Failures of the final candidates by kind and level", ""]
    lines += ["| scaffold | kind | level | trials with a violation |", "|---|---|---|---|"]
    for scaffold, counter in sorted(failures.items()):
        for (kind, level), n in sorted(counter.items()):
            lines.append(f"| {scaffold} | {kind} | {level} | {n} |")
    lines += ["", f"![failures]({plots['failures']})"]
    excluded = [t for t in results.trials.values() if t.status != "ok"]
    if excluded:
        lines += ["", f"## Trials left out of every number ({len(excluded)})", ""]
        lines += [f"- {t.trial_id}: {t.status} ({t.error or t.stop_reason})" for t in excluded]
    if outside:
        lines += ["", f"## Scored trials left out of the means ({len(outside)})", ""]
        lines += [
            f"- {t.trial_id}: another configuration has no scored trial on task {t.task}, seed {t.seed}"
            for t in outside
        ]
    path = bench.root / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def _delta_lines(deltas: dict[str, dict]) -> list[str]:
    lines = []
    for model, d in deltas.items():
        lines.append(
            f"- {model}: mean Δ = {d['mean']:+.4f}, 95% bootstrap CI [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}] "
            f"over {len(d['deltas'])} tasks: "
            + ("shown" if d["ci"][0] > 0 or d["ci"][1] < 0 else "not shown (the interval spans 0)")
        )
        lines += [f"  - {task}: {delta:+.4f}" for task, delta in sorted(d["deltas"].items())]
    return lines


def spending_lines(trials: list[TrialResult]) -> list[str]:
    """Per configuration: mean calls, prompt and completion tokens, the share a provider cache served,
    and which figures twin estimated (replies that reported no usage)."""
    lines = [
        "| model | scaffold | calls | prompt tokens | completion tokens | cached share | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    by_config: dict[tuple[str, str], list[TrialResult]] = defaultdict(list)
    for trial in trials:
        by_config[config_key(trial)].append(trial)
    estimated = False
    for (model, scaffold), group in sorted(by_config.items()):
        prompt = float(np.mean([t.tokens_in for t in group]))
        completion = float(np.mean([t.tokens - t.tokens_in for t in group]))
        reported = [t for t in group if t.tokens_estimated < t.tokens]  # trials whose provider said what it cached
        cached = sum(t.tokens_cached for t in reported) / max(1, sum(t.tokens_in for t in reported))
        share = f"{cached:.0%}" if reported else "not reported"
        mark = "~" if any(t.tokens_estimated for t in group) else ""
        estimated = estimated or bool(mark)
        lines.append(
            f"| {model} | {scaffold} | {np.mean([t.calls for t in group]):.1f} | {mark}{prompt:,.0f} "
            f"| {mark}{completion:,.0f} | {share} | {np.mean([t.wall_s for t in group]):.0f} |"
        )
    if estimated:
        lines += [
            "",
            "~ estimated: some replies reported no token usage (inbox, human, recordings without "
            "usage); twin counted their tokens with a tokenizer.",
        ]
    return lines


def _mean_cost(results: BenchResults) -> dict[tuple[str, str], float]:
    costs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for trial in compared(results)[0]:
        costs[config_key(trial)].append(trial.cost_usd)
    return defaultdict(float, {k: float(np.mean(v)) for k, v in costs.items()})


def _plots(root: Path, results, table, deltas, transitions, failures) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {}

    fig, ax = plt.subplots(figsize=(6, 4))
    for (model, scaffold), by_round in sorted(table.items()):
        rs = sorted(by_round)
        ax.errorbar(
            rs,
            [by_round[r][0] for r in rs],
            yerr=[by_round[r][1] for r in rs],
            marker="o",
            capsize=4,
            label=f"{scaffold} · {model[:30]}",
        )
    seeds = max((n for by_round in table.values() for _, _, n in by_round.values()), default=0)
    title = f"Reward by round (mean ± std over seeds, n = {seeds} seeds)"
    ax.set(xlabel="round budget", ylabel="reward", ylim=(0, 1.05), title=title)
    ax.set_xticks(range(1, results.config.rounds + 1))  # rounds are whole numbers
    if table:  # an interrupted bench may have no graded round yet: an empty plot, no legend
        ax.legend(fontsize=7)
    names["rounds"] = _save(fig, root / "rewards_by_round.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (model, d) in enumerate(deltas.items()):
        tasks = sorted(d["deltas"])
        ax.bar([f"{t}" for t in tasks], [d["deltas"][t] for t in tasks], alpha=0.7, label=model[:30])
        ax.axhline(d["mean"], linestyle="--", color=f"C{i}")
        ax.axhspan(d["ci"][0], d["ci"][1], alpha=0.15, color=f"C{i}")
    ax.axhline(0, color="black", linewidth=0.8)
    n_tasks = max((len(d["deltas"]) for d in deltas.values()), default=0)
    ax.set(ylabel="reward twin − base", title=f"Paired per-task deltas (mean, 95% bootstrap CI, n = {n_tasks} tasks)")
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    names["deltas"] = _save(fig, root / "paired_deltas.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted(transitions)
    bottom = np.zeros(len(keys))
    for label, color in (("improved", "tab:green"), ("stable", "tab:gray"), ("regressed", "tab:red")):
        values = np.array([transitions[k][label] for k in keys], dtype=float)
        ax.bar([f"{s}\n{r}→{r + 1}" for _, s, r in keys], values, bottom=bottom, color=color, label=label)
        bottom += values
    ax.set(ylabel="trials", title=f"Round-to-round changes (n = {int(bottom.sum())} transitions)")
    ax.legend(fontsize=7)
    names["transitions"] = _save(fig, root / "round_transitions.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    colours = {scaffold: f"C{i}" for i, scaffold in enumerate(results.config.scaffolds)}
    for trial in scored(results):
        if trial.reward is not None:
            ax.scatter(trial.cost_usd, trial.reward, color=colours.get(trial.scaffold, "C9"), label=trial.scaffold)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=False))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    n_scored = sum(t.reward is not None for t in scored(results))
    title = f"Reward against cost (n = {n_scored} trials)"
    ax.set(xlabel="dollars per trial", ylabel="reward", ylim=(0, 1.05), title=title)
    names["cost"] = _save(fig, root / "reward_vs_cost.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    categories = sorted({c for counter in failures.values() for c in counter})
    width = 0.8 / max(1, len(failures))
    for i, (scaffold, counter) in enumerate(sorted(failures.items())):
        xs = np.arange(len(categories)) + i * width
        ax.bar(xs, [counter[c] for c in categories], width=width, label=scaffold)
    ax.set_xticks(np.arange(len(categories)) + width / 2 * (len(failures) - 1))
    ax.set_xticklabels([f"{k}\nL{lvl}" for k, lvl in categories], fontsize=7)
    ax.set(ylabel="trials", title=f"Violated properties of final candidates (n = {len(scored(results))} trials)")
    if failures:
        ax.legend(fontsize=7)
    names["failures"] = _save(fig, root / "failures.png")
    return names


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


__all__ = ["write_report", "reward_by_round", "paired_deltas", "round_transitions", "failure_counts"]
