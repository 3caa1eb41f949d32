"""One trial: its run directory, the `twin migrate` process that runs it, and the result read from that directory.

The bench writes each trial's `RunConfig` and a fresh state into the trial's run
directory once, then starts `twin migrate --resume DIR` on it, the first time as
after a kill: a trial's settings are never re-built as command-line flags. How a trial ended
is read from its run directory: an infrastructure failure (twin's own machinery:
model provider, a sandbox that could not start, a grader reporting its own failure)
is `infra_failed`, never scored; a run that stopped on an error of twin's is graded
on what it committed (0 where nothing usable exists). A trial stopped as Ctrl-C stops a
run (its bench was stopped) is `stopped`: not a result, and the next bench resumes it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ground.errors import InfraFailure, Interrupted, RunFailed
from harness.bench.schema import BenchConfig, CurvePoint, TrialResult, TrialSpec
from harness.run.directory import MAX_ROUNDS, RunConfig, RunDir, RunState

STOP_GRACE_S = 60.0
"""How long a stopped bench waits for a trial to stop after its SIGTERM before it kills it."""
_POLL_S = 0.2
KILLED_AT_STOP = 128 + signal.SIGKILL
"""The code a stopped bench records for a trial it killed, past the grace after its SIGTERM
(`harness.bench.trial_processes`); a process's own exit never reads so (a kill reads -9)."""
STOPPED_EXITS = frozenset(
    {Interrupted.exit_code, KILLED_AT_STOP, *(-s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))}
)
"""How a stopped trial's `twin migrate` ends: saved as stopped (130), ended by the signal itself
before its handlers were set (while starting up, before it touched its run directory), or killed
by its bench when it did not stop in time (resumed like the others: a killed run resumes)."""


def trial_config(spec: TrialSpec, config: BenchConfig) -> RunConfig:
    """The `RunConfig` of one trial of the bench `config`.

    Raises:
        RunError: a setting the run refuses (e.g. an empty model name).
    """
    model = {"name": spec.model_name, "api_base": config.api_base, "retries": config.model_retries}
    matched = any(v is not None for v in config.budget.model_dump().values())
    # rounds are twin's knob; a single agent under a matched budget is bounded by that budget alone
    # (it still stops once it submits with nothing failing: `harness.scaffolds.base`)
    rounds = MAX_ROUNDS if matched and spec.scaffold != "twin" else config.rounds
    return RunConfig.build(
        task=spec.task.expanduser().resolve(),
        model={k: v for k, v in model.items() if v is not None},
        scaffold=spec.scaffold,
        rounds=rounds,
        seed=spec.seed,
        sandbox=config.sandbox,
        budget=config.budget,  # matched: the same numbers for every scaffold
        snapshot_every=config.snapshot_every,
        grade_snapshots=config.grade_snapshots,
    )


def prepare_trial(spec: TrialSpec, config: BenchConfig, run_dir: Path) -> list[str]:
    """Write the trial's run directory unless it has one; return the command that runs (or resumes) it.

    The state is written first and `config.json` last: a directory with `config.json` is a run.
    """
    run = RunDir(run_dir)
    if not run.config_path.is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        run.save_state(RunState(run_id=run_dir.name))
        run.write_config(trial_config(spec, config))
    return [sys.executable, "-m", "harness.cli", "migrate", "--resume", str(run_dir)]


def trial_log(run_dir: Path) -> Path:
    """`runs/<trial-id>.log`, the id whole: it may hold dots (`gpt-4.1`, `….jsonl`), and no two trials share a log."""
    return run_dir.with_name(f"{run_dir.name}.log")


def start_trial_process(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start one trial's `twin migrate` with its output in `log_path`, in the bench's process group.

    It is sent SIGTERM (stopping as at Ctrl-C) if the thread that started it ends first: a bench
    killed outright (SIGKILL, the OOM killer) leaves no trial running on, which the next bench
    would resume beside it on the same run directory (util-linux `setpriv --pdeathsig`, where
    installed; the thread waits on the trial for its whole life).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    tied = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    with open(log_path, "ab") as log:  # the child has its own copy
        return subprocess.Popen([*tied, *command], stdout=log, stderr=subprocess.STDOUT, env=env)


def stop_trial(proc: subprocess.Popen, log_path: Path, grace_s: float) -> int:
    """Stop a running trial as a stopped bench does: SIGTERM once (it stops as at Ctrl-C), killed after `grace_s`.

    Returns:
        Its exit code; `KILLED_AT_STOP` where it was killed (a line in its log says why).
    """
    proc.send_signal(signal.SIGTERM)  # nothing where it has just ended and been reaped
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_late_trial(proc, log_path, grace_s)
        proc.wait()
        return KILLED_AT_STOP


def kill_late_trial(proc: subprocess.Popen, log_path: Path, grace_s: float) -> None:
    """Kill a trial that did not stop within `grace_s` of its SIGTERM, saying so in its log."""
    with open(log_path, "a") as handle:
        handle.write(f"twin bench: the trial did not stop within {grace_s:g} s of SIGTERM: killed\n")
    proc.kill()


def timed_trial_process(command: list[str], log: Path, env: dict[str, str]) -> tuple[int, float]:
    """Run a trial where the bench's own threads cannot reach it (a Ray worker); return its exit code and seconds.

    Interrupted (a `KeyboardInterrupt`: what `ray.cancel` raises in the worker running it), the
    trial is stopped as the local pool stops its trials (`stop_trial`), and the interruption goes
    on once it has ended. The wait polls: an interruption raised from another thread is taken
    only between Python steps, never inside a blocking wait.
    """
    started = time.monotonic()
    proc = start_trial_process(command, log, env)
    try:
        while proc.poll() is None:
            time.sleep(_POLL_S)
    except BaseException:
        stop_trial(proc, log, STOP_GRACE_S)
        raise
    return proc.returncode, time.monotonic() - started


def collect_trial(spec: TrialSpec, run_dir: Path, returncode: int, attempts: int, *, rounds: int) -> TrialResult:
    """Read a finished trial's run directory into a `TrialResult`; `rounds` is the bench's (and so the trial's)."""
    from harness.run.finish import RunGrades

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
        if returncode in STOPPED_EXITS:
            result.status, result.error = "stopped", ""
            result.stop_reason = f"stopped (twin migrate exited {returncode})"
        return result
    state = run.load_state()
    result.stop_reason, result.final_round = state.stop_reason, state.final_round
    spent = state.spent  # what it had spent so far, where it stopped
    result.cost_usd, result.tokens, result.calls, result.wall_s = spent.usd, spent.tokens, spent.calls, spent.wall_s
    result.tokens_in, result.tokens_cached, result.tokens_estimated = (
        spent.tokens_in,
        spent.tokens_cached,
        spent.tokens_estimated,
    )
    if returncode in STOPPED_EXITS:  # kept for resuming, whatever it had done
        result.status = "stopped"
        if returncode == KILLED_AT_STOP:
            result.stop_reason = "killed by its bench: it did not stop in time after SIGTERM"
        elif state.status != "stopped" or not state.stop_reason:  # e.g. stopped while it graded a finished run
            result.stop_reason = f"stopped (twin migrate exited {returncode})"
        return result
    if returncode == InfraFailure.exit_code or state.stop_reason.startswith("infrastructure"):
        result.status, result.error = "infra_failed", state.stop_reason
        return result
    if returncode not in (0, RunFailed.exit_code) or not run.grades.is_file():  # a failed run is graded
        result.status, result.error = "failed", f"twin migrate exited {returncode}"
        return result
    grades = RunGrades.model_validate_json(run.grades.read_text())
    if any(g.error and g.reward is None for g in grades.rounds):
        result.status = "infra_failed"
        result.error = "; ".join(g.error for g in grades.rounds if g.error)
    result.model_label = grades.model
    # the one field read raw: a whole `RunConfig` would parse the trial's model name a second time in the bench
    rule = json.loads(run.config_path.read_text()).get("final_rule") or RunConfig.model_fields["final_rule"].default
    result.snapshot_rewards = {g.round: g.reward for g in grades.rounds}
    result.curve = [
        CurvePoint(calls=g.snapshot.calls, tokens=g.snapshot.tokens, usd=g.snapshot.usd, wall_s=g.snapshot.wall_s,
                   reward=g.reward)
        for g in grades.snapshots
        if g.reward is not None
    ]  # fmt: skip
    # a single agent bounded by a matched budget alone may run more rounds than the bench's: its final one counts
    for r in range(1, max(rounds, *(rs.round for rs in state.rounds), 0) + 1):
        chosen = state.choice_with_rounds(r, rule)
        result.rewards[r] = result.snapshot_rewards.get(chosen) if chosen else None
        if result.rewards[r] is None and result.status == "ok" and state.stop_reason.startswith("error:"):
            result.rewards[r] = 0.0  # the run stopped on twin's error before anything usable: scored, as 0
    return result
