"""`twin bench` and `twin report`: compare scaffolds and rounds over tasks, models and seeds."""

from __future__ import annotations

from pathlib import Path

import typer

from evidence_store import numbers
from ground.errors import TwinError
from ground.terminal import agent_console
from harness.bench.directory import BenchDir
from harness.bench.report import write_report
from harness.bench.run import run_bench
from harness.bench.schema import BenchConfig
from harness.models.budget import Budget
from harness.models.ledger import LedgerLimits
from harness.scaffolds.registry import SCAFFOLDS


def bench_command(
    tasks: list[Path] = typer.Option(..., "--tasks", help="Task directories (repeat the option)."),
    model: list[str] = typer.Option(
        ..., "--model", help="Model strings (repeat); {task}, {scaffold}, {seed} are filled in."
    ),
    scaffold: str = typer.Option("twin,base", "--scaffold", help="Comma-separated: twin,base,mini-swe-agent."),
    rounds: int = typer.Option(2, "--rounds", min=1),
    seeds: int = typer.Option(1, "--seeds", min=1),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Trials at once (local executor)."),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    address: str = typer.Option(None, "--address", help="Ray cluster address."),
    name: str = typer.Option(None, "--name", help="Bench name (directory under --benches-dir)."),
    benches_dir: Path = typer.Option(Path("benches"), "--benches-dir", envvar="TWIN_BENCHES_DIR"),
    max_usd: float = typer.Option(None, "--max-usd", help="Dollar budget of the whole bench."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Token budget of the whole bench."),
    trial_max_tokens: int = typer.Option(None, "--trial-max-tokens", help="Every trial's token budget."),
    trial_max_usd: float = typer.Option(None, "--trial-max-usd", help="Every trial's dollar budget."),
    trial_max_calls: int = typer.Option(None, "--trial-max-calls", help="Every trial's model-call budget."),
    trial_max_wall_s: float = typer.Option(None, "--trial-max-wall-s", help="Every trial's wall-time budget (s)."),
    snapshot_every: int = typer.Option(8, "--snapshot-every", min=0, help="Snapshot every N model calls."),
    grade_snapshots: bool = typer.Option(
        True, "--grade-snapshots/--no-grade-snapshots", help="Grade every snapshot: each trial's reward curve."
    ),
    sandbox: str = typer.Option("auto", "--sandbox"),
    api_base: str = typer.Option(None, "--api-base"),
    retries: int = typer.Option(2, "--infra-retries", min=0),
    backoff: float = typer.Option(30.0, "--retry-backoff-s", min=0),
    report: bool = typer.Option(True, "--report/--no-report", help="Write the report at the end."),
    skip_task_check: bool = typer.Option(
        False, "--skip-task-check", envvar="TWIN_SKIP_TASK_CHECK", help="Do not grade each task's oracle first."
    ),
) -> None:
    """Run trials over tasks x models x scaffolds x seeds and grade every round."""
    scaffolds = [s.strip() for s in scaffold.split(",") if s.strip()]
    unknown = set(scaffolds) - set(SCAFFOLDS)
    if unknown or not scaffolds:
        raise TwinError(f"unknown scaffold(s) {sorted(unknown)}: choose from {', '.join(SCAFFOLDS)}")
    if executor not in ("local", "ray"):
        raise TwinError(f"unknown executor {executor!r}: choose local or ray")
    config = BenchConfig(
        name=name or f"bench-{len(tasks)}t-{len(model)}m-r{rounds}-s{seeds}",
        tasks=[t.expanduser().resolve() for t in tasks],
        models=model,
        scaffolds=scaffolds,
        rounds=rounds,
        seeds=seeds,
        jobs=jobs,
        executor=executor,
        ray_address=address,
        limits=LedgerLimits(max_usd=max_usd, max_tokens=max_tokens),
        budget=trial_budget(trial_max_tokens, trial_max_usd, trial_max_calls, trial_max_wall_s),
        snapshot_every=snapshot_every,
        grade_snapshots=grade_snapshots,
        sandbox=sandbox,
        api_base=api_base,
        infra_retries=retries,
        retry_backoff_s=backoff,
    )
    from harness.cli.task import check_before_run
    from task_model.loader import load_task_for_sandbox

    loaded = {}
    for task in config.tasks:  # each loaded once (under docker its image built); its notes on stderr; checked once
        loaded[task] = load_task_for_sandbox(task, sandbox)
        check_before_run(loaded[task], sandbox, skip=skip_task_check)
    console = agent_console()

    def show(result) -> None:
        reward = "-" if result.reward is None else numbers.reward(result.reward)
        console.print(f"{result.trial_id}: {result.status} reward={reward} ${result.cost_usd:.4f}", highlight=False)

    results = run_bench(config, benches_dir, tasks=loaded, on_trial=show)
    done = sum(t.status == "ok" for t in results.trials.values())
    console.print(f"bench {config.name}: {done}/{len(results.trials)} trials scored — {benches_dir / config.name}")
    if report:
        console.print(f"report: {write_report(BenchDir(benches_dir / config.name))}")


def trial_budget(tokens: int | None, usd: float | None, calls: int | None, wall_s: float | None) -> Budget:
    """Every trial's budget, the same numbers for every scaffold (matched budgets).

    Raises:
        TwinError: a negative limit, named by its option.
    """
    from pydantic import ValidationError

    try:
        return Budget(max_tokens=tokens, max_usd=usd, max_calls=calls, max_wall_s=wall_s)
    except ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0]).removeprefix("max_").replace("_", "-")
        raise TwinError(f"--trial-max-{field}: {exc.errors()[0]['msg']}") from None


def report_command(
    bench: str = typer.Argument(..., help="Bench directory or name."),
    benches_dir: Path = typer.Option(Path("benches"), "--benches-dir", envvar="TWIN_BENCHES_DIR"),
    band: float = typer.Option(0.01, "--stable-band", help="|Δreward| up to this counts as stable."),
    axis: str = typer.Option("tokens", "--axis", help="Read the reward curves over tokens, usd, calls or wall_s."),
) -> None:
    """Write a markdown report with plots for a bench."""
    path = write_report(BenchDir.open(bench, benches_dir), band=band, axis=axis)
    agent_console().print(f"report: {path}")
