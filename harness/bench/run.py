"""`twin bench`: every (task, model, scaffold, seed) trial is one `twin migrate` run.

Finished trials are never re-run; an interrupted trial is resumed from its run
directory. A bench stopped by Ctrl-C, SIGTERM or SIGHUP stops its running trials as
Ctrl-C stops a run (`harness.bench.trial_processes`), records itself as interrupted and
exits 130; the same `twin bench` command resumes it. A trial that failed for
infrastructure reasons is retried with backoff and, if it keeps failing, is marked so
and left out of every average (never scored as 0). A grader that fails because of the
candidate is reward 0. The layout of a bench's directory is in `harness.bench.directory`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ground.errors import Interrupted, StopSignal
from ground.untrusted_io import write_text_atomic
from harness.bench.checks import post_run_failures
from harness.bench.directory import BenchDir
from harness.bench.executors import run_locally, run_with_ray
from harness.bench.schema import (
    RESULTS_VERSION,
    BenchConfig,
    BenchError,
    BenchResults,
    TrialResult,
    TrialSpec,
    trials_of,
)
from harness.bench.trials import collect_trial, prepare_trial
from harness.models.ledger import LEDGER_ENV, Ledger
from task_model.model import Task


def run_bench(
    config: BenchConfig,
    benches_dir: Path = Path("benches"),
    *,
    tasks: Mapping[Path, Task] | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> BenchResults:
    """Run (or resume) a bench; return its results.

    Args:
        tasks: the bench's tasks as the command loaded them, by directory; one not given is
            loaded here. Each is loaded once, before any trial starts.
    """
    from task_model.loader import load_task

    loaded = {path: (tasks or {}).get(path) or load_task(path) for path in config.tasks}
    bench = BenchDir(benches_dir / config.name)
    bench.root.mkdir(parents=True, exist_ok=True)
    with bench.held():  # one twin bench at a time in a bench's directory: two would run the same trials
        return _run_held(bench, config, loaded, on_trial)


def _run_held(
    bench: BenchDir,
    config: BenchConfig,
    loaded: Mapping[Path, Task],
    on_trial: Callable[[TrialResult], None] | None,
) -> BenchResults:
    """`run_bench` once its directory is held."""
    if bench.results_path.is_file():
        results = bench.load()
        # the format's version is no setting: a bench written by an older twin resumes under the same settings
        unrelated = {"jobs", "executor", "ray_address", "limits", "schema_version"}
        if results.config.model_dump(exclude=unrelated) != config.model_dump(exclude=unrelated):
            raise BenchError(f"bench {config.name} exists with another configuration; choose another --name")
        results.config = config
        results.schema_version = RESULTS_VERSION  # rewritten from now on in this version's format
    else:
        results = BenchResults(config=config)
    results.status, results.stop_reason = "running", ""
    write_text_atomic(bench.config_path, config.model_dump_json(indent=2))
    bench.save(results)
    ledger = Ledger.create(bench.ledger_path, config.limits)
    env = {**os.environ, LEDGER_ENV: str(bench.ledger_path.resolve())}

    def needs_run(previous: TrialResult | None) -> bool:
        if previous is None or previous.status in ("not_started", "stopped"):
            return True
        return previous.status == "infra_failed" and previous.attempts <= config.infra_retries

    pending = [spec for spec in trials_of(config) if needs_run(results.trials.get(spec.trial_id))]
    attempts_n = {
        spec.trial_id: results.trials[spec.trial_id].attempts if spec.trial_id in results.trials else 0
        for spec in pending
    }

    def launch(spec: TrialSpec) -> tuple[list[str], Path]:
        run_dir = bench.runs / spec.trial_id
        return prepare_trial(spec, config, run_dir.resolve()), run_dir

    def record(spec: TrialSpec, code: int, started: float, model_and_grader_s: float) -> TrialResult:
        # model_and_grader_s: time inside the trial's own process; the rest is the bench's
        result = collect_trial(
            spec, bench.runs / spec.trial_id, code, attempts_n[spec.trial_id] + 1, rounds=config.rounds
        )
        if result.status == "stopped":  # resumed by the next bench, not retried: no attempt of the retries'
            result.attempts = attempts_n[spec.trial_id]
        attempts_n[spec.trial_id] = result.attempts
        if result.status == "ok":
            result.failures = post_run_failures(loaded[spec.task], bench.runs / spec.trial_id, config.sandbox)
        result.trial_wall_s = time.monotonic() - started
        results.trials[spec.trial_id] = result
        results.overhead_s[spec.trial_id] = max(0.0, result.trial_wall_s - model_and_grader_s)
        bench.save(results)
        if on_trial is not None:
            on_trial(result)
        return result

    queue = list(pending)
    try:
        if config.executor == "ray":
            run_with_ray(config, queue, launch, record, env, ledger)
        else:
            run_locally(config, queue, launch, record, env, ledger)
    except KeyboardInterrupt as exc:  # its trials stopped and recorded; later signals are ignored
        results.status = "interrupted"
        results.stop_reason = f"stopped by {exc.name}" if isinstance(exc, StopSignal) else "interrupted"
        bench.save(results)
        left = sum(needs_run(results.trials.get(spec.trial_id)) for spec in trials_of(config))
        raise Interrupted(
            f"bench {config.name} {results.stop_reason}: {len(trials_of(config)) - left} trial(s) done, {left} to run "
            f"or resume; continue with the same twin bench command ({bench.root})"
        ) from None
    results.status = "finished"
    bench.save(results)
    return results
