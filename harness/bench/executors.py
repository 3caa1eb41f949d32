"""Where a bench's trials run: a local pool of processes or a Ray cluster.

An executor takes the queue of pending trials, launches each while the bench's
ledger has budget left, hands every finished trial to `record`, and queues again a
trial that failed for infrastructure reasons, after a backoff that doubles, until it
has had its retries. Either stops its trials cleanly when the bench is stopped: each running
`twin migrate` is sent SIGTERM once (it stops as at Ctrl-C, its run saved for resuming) and
killed if it has not stopped after a grace; no further trial starts.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait

from ground.errors import Interrupted, TwinError
from harness.bench.schema import BenchError, TrialSpec
from harness.bench.trial_processes import TrialProcesses
from harness.bench.trials import timed_trial_process, trial_log
from harness.models.ledger import Ledger

_POLL_S = 0.2


def budget_left(ledger: Ledger) -> bool:
    try:
        ledger.check()
    except TwinError:
        return False
    return True


def run_locally(config, queue, launch, record, env, ledger) -> None:
    """Run the queue in a pool of `config.jobs` trial processes.

    Stopped (Ctrl-C, SIGTERM, SIGHUP: a `KeyboardInterrupt` here), it stops every running trial
    (`TrialProcesses.stop`), records each as it ends (stopped, or finished just then), and
    raises again; twin's handlers ignore any later signal meanwhile (`harness.cli.stop_signals`).
    """
    processes = TrialProcesses()
    running: dict[Future, tuple[TrialSpec, float]] = {}
    with ThreadPoolExecutor(max_workers=config.jobs) as pool:
        try:
            while queue or running:
                while queue and len(running) < config.jobs and budget_left(ledger):
                    spec = queue.pop(0)
                    command, run_dir = launch(spec)
                    log = trial_log(run_dir)
                    running[pool.submit(processes.run, command, log, env)] = (spec, time.monotonic())
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
        except KeyboardInterrupt:
            processes.stop()
            for future in as_completed(running):
                spec, started = running[future]
                code, inner_s = future.result()
                if code is not None:  # None: stopped before it started, its record as it was
                    record(spec, code, started, inner_s)
            raise


def run_with_ray(config, queue, launch, record, env, ledger) -> None:
    """Run the queue as Ray tasks, a batch at a time while the ledger has budget left.

    Stopped (a `KeyboardInterrupt` here), it cancels every trial not yet recorded: `ray.cancel`
    raises `KeyboardInterrupt` in the worker running it, which stops its `twin migrate` as the
    local pool does (`trials.timed_trial_process`); a trial not started yet never starts. Each is
    recorded once it has ended, as stopped where it was stopped, and the interruption goes on.
    """
    try:
        import ray
    except ImportError:
        raise BenchError("the ray executor needs the ray extra: pip install 'twin-harness[ray]'") from None
    if not ray.is_initialized():
        kept = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        ray.init(address=config.ray_address, include_dashboard=False, log_to_driver=False)
        if threading.current_thread() is threading.main_thread():  # Ray's SIGTERM handler exits at once:
            for number, handler in kept.items():  # twin's clean stop again
                if handler is not None:
                    signal.signal(number, handler)
    remote = ray.remote(num_cpus=1, max_retries=0)(timed_trial_process)
    batch: list[tuple[TrialSpec, float, object]] = []
    try:
        while queue:
            while queue and budget_left(ledger):
                spec = queue.pop(0)
                command, run_dir = launch(spec)
                batch.append((spec, time.monotonic(), remote.remote(command, trial_log(run_dir), env)))
            if not batch:
                break
            while batch:
                spec, started, ref = batch[0]
                while not ray.wait([ref], timeout=0)[0]:  # a stop signal raised inside ray.get would
                    time.sleep(_POLL_S)  # come out a bare KeyboardInterrupt: waited for here instead
                code, inner_s = ray.get(ref)
                batch.pop(0)
                result = record(spec, code, started, inner_s)
                if result.status == "infra_failed" and result.attempts <= config.infra_retries:
                    time.sleep(config.retry_backoff_s * (2 ** (result.attempts - 1)))
                    queue.append(spec)
    except KeyboardInterrupt:
        for _spec, _started, ref in batch:
            ray.cancel(ref)
        for spec, started, ref in batch:
            try:
                code, inner_s = ray.get(ref)  # one that ended before its cancel: as it ended
            except ray.exceptions.RayError:  # cancelled (its worker stopped the trial first), or its worker lost:
                code, inner_s = Interrupted.exit_code, time.monotonic() - started  # resumed as stopped either way
            record(spec, code, started, inner_s)
        raise
