"""`twin bench`: every (task, model, scaffold, seed) trial is one `twin migrate` run.

A bench lives in `benches/<name>/`: `bench.json` (its configuration), `results.json`
(typed, versioned, rewritten atomically after every trial), `ledger.json` (dollars
and tokens spent by all trials together), `runs/<trial-id>/` (each trial's run
directory) and `runs/<trial-id>.log`. Finished trials are never re-run; an
interrupted trial is resumed from its run directory; a trial that failed for
infrastructure reasons (twin's own machinery: model provider, a sandbox that could
not start, a grader reporting its own failure) is retried with backoff and, if it
keeps failing, is marked so and left out of every average (never scored as 0). A
grader that fails because of the candidate is reward 0, and a run that stopped on an
error of twin's is graded on what it committed (0 where nothing usable exists).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from benchmark_adapter.task import load_task
from harness.candidate_repo import CandidateRepo
from harness.finish import RunGrades
from harness.ground.errors import InfraFailure, TwinError
from harness.ledger import LEDGER_ENV, Ledger, LedgerLimits
from harness.run import RunDir, Scaffold, write_text_atomic
from probes.context import make_context
from probes.suite import builtin_checks, run_probes

RESULTS_VERSION = 1
TrialStatus = Literal["ok", "failed", "infra_failed", "not_started"]


class BenchError(TwinError):
    """A bench that cannot be run as asked."""


class BenchConfig(BaseModel):
    """What a bench runs; written to `bench.json`."""

    schema_version: int = Field(default=RESULTS_VERSION)
    name: str = Field(description="Bench directory name under the benches root.")
    tasks: list[Path] = Field(description="Task directories.")
    models: list[str] = Field(
        description="Model strings; '{task}', '{scaffold}' and '{seed}' are filled in per trial "
        "(e.g. replay:examples/{task}/{scaffold}.jsonl)."
    )
    scaffolds: list[Scaffold] = Field(default_factory=lambda: ["twin", "base"])
    rounds: int = Field(default=2, ge=1, description="Rounds of every trial.")
    seeds: int = Field(default=1, ge=1, description="Seeds per configuration.")
    jobs: int = Field(default=1, ge=1, description="Trials run at once (local executor).")
    executor: Literal["local", "ray"] = Field(default="local")
    ray_address: str | None = Field(default=None, description="Ray cluster address (None: local Ray).")
    limits: LedgerLimits = Field(default_factory=LedgerLimits, description="Budget of the whole bench.")
    sandbox: str = Field(default="auto", description="Sandbox of every trial.")
    api_base: str | None = Field(default=None, description="Base URL for every trial's model.")
    model_retries: int | None = Field(default=None, ge=0, description="Retries of one model call.")
    infra_retries: int = Field(default=2, ge=0, description="Retries of an infrastructure failure.")
    retry_backoff_s: float = Field(default=30.0, ge=0, description="First retry delay (doubles).")


class TrialSpec(BaseModel):
    """One trial."""

    task: Path
    model: str
    scaffold: Scaffold
    seed: int

    @property
    def task_name(self) -> str:
        """The task directory's name, or a settings file's stem (`--tasks my-port.toml`)."""
        return self.task.stem if self.task.suffix == ".toml" and self.task.is_file() else self.task.name

    @property
    def model_name(self) -> str:
        return self.model.format(task=self.task_name, scaffold=self.scaffold, seed=self.seed)

    @property
    def trial_id(self) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.model).strip("-")[:60]
        return f"{self.task_name}__{slug}__{self.scaffold}__s{self.seed}"


class TrialResult(BaseModel):
    """What one trial produced."""

    trial_id: str
    task: str
    model: str = Field(description="The model string as configured (with placeholders).")
    model_label: str = Field(default="", description="e.g. 'replayed from …' for a replay.")
    scaffold: Scaffold
    seed: int
    status: TrialStatus
    rewards: dict[int, float | None] = Field(
        default_factory=dict,
        description="Reward of the candidate the scaffold would have delivered with a budget of "
        "r rounds, for r = 1..R (the ablation).",
    )
    snapshot_rewards: dict[int, float | None] = Field(
        default_factory=dict, description="Reward of each round's snapshot."
    )
    final_round: int | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    calls: int = 0
    wall_s: float = 0.0
    stop_reason: str = ""
    trial_wall_s: float = Field(default=0.0, description="Launch to collected result, this attempt.")
    attempts: int = 0
    error: str = ""
    failures: list[dict] = Field(
        default_factory=list,
        description="Violated properties of the final candidate by the same post-run checks "
        "for every scaffold: {id, kind, level}.",
    )

    @property
    def reward(self) -> float | None:
        return self.rewards.get(max(self.rewards)) if self.rewards else None


class BenchResults(BaseModel):
    """`results.json`."""

    schema_version: int = Field(default=RESULTS_VERSION)
    config: BenchConfig
    trials: dict[str, TrialResult] = Field(default_factory=dict)
    overhead_s: dict[str, float] = Field(
        default_factory=dict,
        description="Per trial: time outside its `twin migrate` process (bookkeeping, post-run checks).",
    )


class BenchDir:
    """Paths and persistence of one bench."""

    def __init__(self, root: Path) -> None:
        self.root = root

    config_path = property(lambda self: self.root / "bench.json")
    results_path = property(lambda self: self.root / "results.json")
    ledger_path = property(lambda self: self.root / "ledger.json")
    runs = property(lambda self: self.root / "runs")

    @classmethod
    def open(cls, bench: str | Path, benches_dir: Path = Path("benches")) -> BenchDir:
        root = Path(bench)
        if not (root / "results.json").is_file():
            root = benches_dir / str(bench)
        if not (root / "results.json").is_file():
            raise BenchError(f"no bench at {bench}: expected a directory with results.json")
        return cls(root)

    def load(self) -> BenchResults:
        try:
            results = BenchResults.model_validate_json(self.results_path.read_text())
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read {self.results_path}: {str(exc).splitlines()[0]}") from None
        if results.schema_version > RESULTS_VERSION:
            raise BenchError(f"{self.results_path} was written by a newer twin")
        return results

    def save(self, results: BenchResults) -> None:
        write_text_atomic(self.results_path, results.model_dump_json(indent=2))


def trials_of(config: BenchConfig) -> list[TrialSpec]:
    return [
        TrialSpec(task=task, model=model, scaffold=scaffold, seed=seed)
        for task in config.tasks
        for model in config.models
        for scaffold in config.scaffolds
        for seed in range(config.seeds)
    ]


# ---- one trial ---------------------------------------------------------------------------------
def trial_command(spec: TrialSpec, config: BenchConfig, run_dir: Path) -> list[str]:
    """The `twin migrate` command of a trial (a resume when its run directory exists)."""
    base = [sys.executable, "-m", "harness.cli", "migrate"]
    if (run_dir / "config.json").is_file():
        return [*base, "--resume", str(run_dir)]
    command = [
        *base,
        "--task",
        str(spec.task),
        "--model",
        spec.model_name,
        "--scaffold",
        spec.scaffold,
        "--rounds",
        str(config.rounds),
        "--seed",
        str(spec.seed),
        "--runs-dir",
        str(run_dir.parent),
        "--run-id",
        run_dir.name,
        "--sandbox",
        config.sandbox,
    ]
    if config.api_base:
        command += ["--api-base", config.api_base]
    if config.model_retries is not None:
        command += ["--model-retries", str(config.model_retries)]
    return command


def run_trial_process(command: list[str], log_path: Path, env: dict[str, str]) -> int:
    """Run one trial's `twin migrate` with its output in `log_path`; return the exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def collect_trial(spec: TrialSpec, run_dir: Path, returncode: int, attempts: int) -> TrialResult:
    """Read a finished trial's run directory into a `TrialResult`."""
    result = TrialResult(
        trial_id=spec.trial_id,
        task=spec.task_name,
        model=spec.model,
        scaffold=spec.scaffold,
        seed=spec.seed,
        status="ok",
        attempts=attempts,
    )
    run = RunDir(run_dir)
    if not run.state_path.is_file():
        result.status = "infra_failed" if returncode == InfraFailure.exit_code else "failed"
        result.error = f"twin migrate exited {returncode} before the run started"
        return result
    state = run.load_state()
    result.stop_reason, result.final_round = state.stop_reason, state.final_round
    spent = state.spent
    result.cost_usd, result.tokens, result.calls, result.wall_s = spent.usd, spent.tokens, spent.calls, spent.wall_s
    if returncode == InfraFailure.exit_code or state.stop_reason.startswith("infrastructure"):
        result.status, result.error = "infra_failed", state.stop_reason
        return result
    if returncode != 0 or not run.grades.is_file():
        result.status, result.error = "failed", f"twin migrate exited {returncode}"
        return result
    grades = RunGrades.model_validate_json(run.grades.read_text())
    if any(g.error and g.reward is None for g in grades.rounds):
        result.status = "infra_failed"
        result.error = "; ".join(g.error for g in grades.rounds if g.error)
    result.model_label = grades.model
    result.snapshot_rewards = {g.round: g.reward for g in grades.rounds}
    for r in range(1, run.load_config().rounds + 1):
        chosen = state.choice_with_rounds(r)
        result.rewards[r] = result.snapshot_rewards.get(chosen) if chosen else None
        if result.rewards[r] is None and result.status == "ok" and state.stop_reason.startswith("error:"):
            result.rewards[r] = 0.0  # the run stopped on twin's error before anything usable: scored, as 0
    return result


# ---- the bench ---------------------------------------------------------------------------------
Executor = Callable[[list[tuple[TrialSpec, list[str], Path, dict[str, str]]]], Iterable[tuple[TrialSpec, int]]]


def run_bench(
    config: BenchConfig,
    benches_dir: Path = Path("benches"),
    *,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> BenchResults:
    """Run (or resume) a bench; return its results."""
    for task in config.tasks:
        load_task(task)
    bench = BenchDir(benches_dir / config.name)
    bench.root.mkdir(parents=True, exist_ok=True)
    if bench.results_path.is_file():
        results = bench.load()
        if results.config.model_dump(exclude={"jobs", "executor", "ray_address", "limits"}) != config.model_dump(
            exclude={"jobs", "executor", "ray_address", "limits"}
        ):
            raise BenchError(f"bench {config.name} exists with another configuration; choose another --name")
        results.config = config
    else:
        results = BenchResults(config=config)
    write_text_atomic(bench.config_path, config.model_dump_json(indent=2))
    bench.save(results)
    ledger = Ledger.create(bench.ledger_path, config.limits)
    env = {**os.environ, LEDGER_ENV: str(bench.ledger_path.resolve())}

    def needs_run(previous: TrialResult | None) -> bool:
        if previous is None or previous.status == "not_started":
            return True
        return previous.status == "infra_failed" and previous.attempts <= config.infra_retries

    pending = [spec for spec in trials_of(config) if needs_run(results.trials.get(spec.trial_id))]
    attempts_n = {
        spec.trial_id: results.trials[spec.trial_id].attempts if spec.trial_id in results.trials else 0
        for spec in pending
    }

    def launch(spec: TrialSpec) -> tuple[list[str], Path]:
        run_dir = bench.runs / spec.trial_id
        return trial_command(spec, config, run_dir.resolve()), run_dir

    def record(spec: TrialSpec, code: int, started: float, model_and_grader_s: float) -> TrialResult:
        # model_and_grader_s: time inside the trial's own process; the rest is the bench's
        attempts_n[spec.trial_id] += 1
        result = collect_trial(spec, bench.runs / spec.trial_id, code, attempts_n[spec.trial_id])
        if result.status == "ok":
            result.failures = post_run_failures(spec, bench.runs / spec.trial_id, config.sandbox)
        result.trial_wall_s = time.monotonic() - started
        results.trials[spec.trial_id] = result
        results.overhead_s[spec.trial_id] = max(0.0, result.trial_wall_s - model_and_grader_s)
        bench.save(results)
        if on_trial is not None:
            on_trial(result)
        return result

    queue = list(pending)
    if config.executor == "ray":
        _run_with_ray(config, queue, launch, record, env, ledger)
    else:
        _run_locally(config, queue, launch, record, env, ledger)
    return results


def budget_left(ledger: Ledger) -> bool:
    try:
        ledger.check()
    except TwinError:
        return False
    return True


def _run_locally(config, queue, launch, record, env, ledger) -> None:
    running: dict[Future, tuple[TrialSpec, float]] = {}
    with ThreadPoolExecutor(max_workers=config.jobs) as pool:
        while queue or running:
            while queue and len(running) < config.jobs and budget_left(ledger):
                spec = queue.pop(0)
                command, run_dir = launch(spec)
                log = run_dir.with_suffix(".log")
                running[pool.submit(_timed_process, command, log, env)] = (spec, time.monotonic())
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                spec, started = running.pop(future)
                code, inner_s = future.result()
                result = record(spec, code, started, inner_s)
                if result.status == "infra_failed" and result.attempts <= config.infra_retries:
                    delay = config.retry_backoff_s * (2 ** (result.attempts - 1))
                    time.sleep(delay)
                    queue.append(spec)


def _timed_process(command: list[str], log: Path, env: dict[str, str]) -> tuple[int, float]:
    """Run a trial; return its exit code and the time spent in its process (model, sandbox, grader)."""
    started = time.monotonic()
    code = run_trial_process(command, log, env)
    return code, time.monotonic() - started


def _run_with_ray(config, queue, launch, record, env, ledger) -> None:
    try:
        import ray
    except ImportError:
        raise BenchError("the ray executor needs the ray extra: pip install 'twin-harness[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=config.ray_address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1)(_timed_process)
    while queue:
        batch = []
        while queue and budget_left(ledger):
            spec = queue.pop(0)
            command, run_dir = launch(spec)
            batch.append((spec, time.monotonic(), remote.remote(command, run_dir.with_suffix(".log"), env)))
        if not batch:
            break
        for spec, started, ref in batch:
            code, inner_s = ray.get(ref)
            result = record(spec, code, started, inner_s)
            if result.status == "infra_failed" and result.attempts <= config.infra_retries:
                time.sleep(config.retry_backoff_s * (2 ** (result.attempts - 1)))
                queue.append(spec)


def post_run_failures(spec: TrialSpec, run_dir: Path, sandbox: str) -> list[dict]:
    """Run the same built-in checks on every scaffold's final candidate (after the run).

    The twin loop's own evidence cannot be compared with a base scaffold that has none,
    so the failure taxonomy of a bench comes from these checks, identical for both.
    """
    import tempfile

    run = RunDir(run_dir)
    state = run.load_state()
    if state.final_round is None:
        return []
    task = load_task(spec.task)
    repo = CandidateRepo(run.candidate, run.candidate_git)
    with tempfile.TemporaryDirectory(prefix="twin-post-") as tmp:
        snapshot = repo.export(state.final_round, Path(tmp) / "candidate")
        ctx = make_context(task, snapshot, sandbox_kind=sandbox)
        results = run_probes(ctx, builtin_checks(task))
    return [
        {"id": r.property.id, "kind": r.property.kind, "level": r.property.level}
        for r in results
        if r.outcome.value == "violated"
    ]
