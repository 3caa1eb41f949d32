"""Benches of scripted trials on the tiny-calc fixture: both scaffolds, two rounds, resume, budget."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness.bench.directory import BenchDir
from harness.bench.run import run_bench
from harness.bench.schema import BenchConfig, TrialSpec
from harness.bench.trials import collect_trial, prepare_trial
from harness.cli.app import main
from harness.models.config import ModelConfig
from harness.models.ledger import LedgerLimits
from harness.run.directory import RunDir
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="trials run in the bwrap sandbox")


def scripts(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir(exist_ok=True)
    plans.write_script(folder / "tiny-calc-twin.json", plans.twin_regress_in_round_two())
    plans.write_script(folder / "tiny-calc-base.json", plans.base_two_rounds())
    return f"scripted:{folder}/{{task}}-{{scaffold}}.json"


def config(tmp_path, **kw) -> BenchConfig:
    return BenchConfig(
        name="b", tasks=[plans.TINY_TASK], models=[scripts(tmp_path)], rounds=2, seeds=1, retry_backoff_s=0, **kw
    )


@pytest.mark.heavy  # a whole bench, graded
def test_bench_runs_both_scaffolds_grades_every_round_and_reports(tmp_path):
    results = run_bench(config(tmp_path), tmp_path / "benches")
    twin = next(t for t in results.trials.values() if t.scaffold == "twin")
    base = next(t for t in results.trials.values() if t.scaffold == "base")
    assert twin.status == base.status == "ok"
    # twin: round 2 regressed, so a 2-round budget still delivers round 1
    assert twin.snapshot_rewards == {1: 1.0, 2: 0.5}
    assert twin.rewards == {1: 1.0, 2: 1.0}
    # base: ordinary continuation, the last round is delivered
    assert base.rewards == base.snapshot_rewards == {1: 0.5, 2: 1.0}
    assert twin.model_label == "scripted"
    on_disk = BenchDir(tmp_path / "benches" / "b").load()
    assert on_disk.trials.keys() == results.trials.keys()
    assert main(["report", "b", "--benches-dir", str(tmp_path / "benches")]) == 0
    report = (tmp_path / "benches" / "b" / "report.md").read_text()
    assert "scripted" in report
    assert "| twin | 1→2 | 0 | 1 | 0 |" in report and "| base | 1→2 | 1 | 0 | 0 |" in report


@pytest.mark.heavy  # a whole bench, run twice
def test_finished_trials_are_not_run_again(tmp_path):
    run_bench(config(tmp_path), tmp_path / "benches")
    log = tmp_path / "benches" / "b" / "runs"
    stamps = {p.name: p.stat().st_mtime for p in log.glob("*.log")}
    again = run_bench(config(tmp_path), tmp_path / "benches")
    assert {p.name: p.stat().st_mtime for p in log.glob("*.log")} == stamps
    assert all(t.attempts == 1 for t in again.trials.values())


def test_spent_bench_budget_starts_no_trial(tmp_path):
    results = run_bench(config(tmp_path, limits=LedgerLimits(max_tokens=0)), tmp_path / "benches")
    assert results.trials == {}


def test_a_trial_is_its_written_run_config_resumed_and_is_written_once(tmp_path):
    cfg = BenchConfig(
        name="b",
        tasks=[plans.TINY_TASK],
        models=["openai/{scaffold}"],
        sandbox="none",
        api_base="http://h/v1",
        model_retries=0,
    )
    spec = TrialSpec(task=plans.TINY_TASK, model="openai/{scaffold}", scaffold="base", seed=3)
    run_dir = tmp_path / "runs" / spec.trial_id
    command = prepare_trial(spec, cfg, run_dir)
    assert command == [sys.executable, "-m", "harness.cli", "migrate", "--resume", str(run_dir)]
    run = RunDir(run_dir)
    config, state = run.load_config(), run.load_state()
    assert config.model == ModelConfig(name="openai/base", api_base="http://h/v1", retries=0)
    assert (config.task, config.scaffold, config.seed, config.rounds, config.sandbox) == (
        plans.TINY_TASK.resolve(),
        "base",
        3,
        2,
        "none",
    )
    assert state.run_id == spec.trial_id and state.rounds == [] and state.status == "running"
    run.config_path.write_text(run.config_path.read_text().replace('"seed": 3', '"seed": 4'))
    assert prepare_trial(spec, cfg, run_dir) == command  # a trial with a run directory is resumed as it is
    assert run.load_config().seed == 4


def test_infrastructure_failure_is_marked_and_never_scored(tmp_path):
    spec = TrialSpec(task=plans.TINY_TASK, model="openai/x", scaffold="twin", seed=0)
    result = collect_trial(spec, tmp_path / "missing-run", returncode=3, attempts=2, rounds=2)
    assert result.status == "infra_failed" and result.rewards == {}


@pytest.mark.heavy  # a trial process per attempt against a refusing server
def test_an_unreachable_model_is_infrastructure_retried_and_never_scored(tmp_path, monkeypatch):
    # a live model whose server refuses connections: infrastructure, retried, left unscored
    cfg = BenchConfig(
        name="infra",
        tasks=[plans.TINY_TASK],
        models=["openai/x"],
        scaffolds=["base"],
        rounds=1,
        api_base="http://127.0.0.1:9/v1",
        infra_retries=1,
        retry_backoff_s=0,
        model_retries=0,
    )
    monkeypatch.setenv("TWIN_API_KEY", "sk-none")
    results = run_bench(cfg, tmp_path / "benches")
    (trial,) = results.trials.values()
    assert trial.status == "infra_failed" and trial.attempts == 2 and trial.rewards == {}


@pytest.mark.slow
def test_killed_bench_resumes_where_it_stopped(tmp_path):
    model = scripts(tmp_path)
    command = [
        sys.executable,
        "-m",
        "harness.cli.app",
        "bench",
        "--tasks",
        str(plans.TINY_TASK),
        "--model",
        model,
        "--rounds",
        "2",
        "--name",
        "k",
        "--benches-dir",
        str(tmp_path / "benches"),
        "--no-report",
    ]
    proc = subprocess.Popen(command, start_new_session=True)
    results = tmp_path / "benches" / "k" / "results.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        if results.exists() and json.loads(results.read_text())["trials"]:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = json.loads(results.read_text())["trials"]
    assert 1 <= len(done_before) < 2
    assert main(command[3:]) == 0
    after = json.loads(results.read_text())["trials"]
    assert len(after) == 2 and all(t["status"] == "ok" for t in after.values())
    for trial_id, trial in done_before.items():
        assert after[trial_id]["attempts"] == trial["attempts"]


@pytest.mark.heavy  # two benches and a ray cluster
def test_ray_executor_gives_the_same_results_as_the_local_pool(tmp_path):
    pytest.importorskip("ray")
    import ray

    local = run_bench(config(tmp_path), tmp_path / "local")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        distributed = run_bench(config(tmp_path, executor="ray"), tmp_path / "ray")
    finally:
        ray.shutdown()
    strip = lambda results: {k: (t.status, t.rewards, t.snapshot_rewards) for k, t in results.trials.items()}  # noqa: E731
    assert strip(distributed) == strip(local)


def test_the_report_shows_estimated_tokens_as_estimates():
    from harness.bench.report import spending_lines
    from harness.bench.schema import TrialResult

    def trial(scaffold, estimated):
        return TrialResult(
            trial_id=scaffold,
            task="t",
            model="inbox:x",
            scaffold=scaffold,
            seed=0,
            status="ok",
            tokens=1200,
            tokens_in=1000,
            tokens_cached=0 if estimated else 250,
            tokens_estimated=1200 if estimated else 0,
            calls=4,
        )

    lines = spending_lines([trial("twin", True), trial("base", False)])
    twin = next(line for line in lines if "| twin |" in line)
    base = next(line for line in lines if "| base |" in line)
    # an estimated trial's replies said nothing of a cache: its share is not reported, not 0%
    assert "| ~1,000 | ~200 | not reported |" in twin and "| 1,000 | 200 | 25% |" in base
    assert any(line.startswith("~ estimated") for line in lines)
    assert not any(line.startswith("~ estimated") for line in spending_lines([trial("base", False)]))


@pytest.mark.heavy  # a whole trial, graded
def test_a_model_reporting_no_usage_is_counted_estimated_in_the_summary_and_the_report(tmp_path):
    """An outside program (inbox), a person or a script may report no token counts: twin counts
    them itself, and every place that shows them says so (never 0 tokens for calls that sent text)."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    replies = [{k: v for k, v in reply.items() if k != "usage"} for reply in plans.base_two_rounds()]
    plans.write_script(folder / "tiny-calc-base.json", replies)
    cfg = BenchConfig(
        name="b",
        tasks=[plans.TINY_TASK],
        models=[f"scripted:{folder}/{{task}}-{{scaffold}}.json"],
        scaffolds=["base"],
        rounds=2,
        retry_backoff_s=0,
    )
    results = run_bench(cfg, tmp_path / "benches")
    [trial] = results.trials.values()
    assert trial.status == "ok" and trial.tokens_in > 0 and trial.tokens_estimated == trial.tokens
    summary = (tmp_path / "benches" / "b" / "runs" / trial.trial_id / "summary.md").read_text()
    assert re.search(r"spent: \d+ model calls \([^)]*\), [1-9][\d,]* tokens \(all estimated\)", summary)
    assert main(["report", "b", "--benches-dir", str(tmp_path / "benches")]) == 0
    report = (tmp_path / "benches" / "b" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| ") and "| base |" in line and "~" in line)
    assert re.search(r"\| ~[1-9][\d,]* \|", row)
    assert "~ estimated" in report


def test_a_negative_trial_budget_is_refused_in_one_line(tmp_path, capsys):
    args = ["bench", "--tasks", str(plans.TINY_TASK), "--model", "scripted:x.json", "--trial-max-calls", "-1"]
    assert main([*args, "--benches-dir", str(tmp_path / "benches"), "--skip-task-check"]) == 2
    err = capsys.readouterr().err
    assert "--trial-max-calls" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "benches").exists()


@pytest.mark.heavy  # a whole bench, its snapshots graded
def test_every_scaffold_runs_under_the_same_budget_and_reports_its_curve(tmp_path):
    benches = tmp_path / "benches"
    args = ["bench", "--tasks", str(plans.TINY_TASK), "--model", scripts(tmp_path), "--name", "m", "--seeds", "2"]
    budget = ["--trial-max-calls", "9", "--trial-max-tokens", "5000", "--snapshot-every", "2"]
    assert main([*args, *budget, "--benches-dir", str(benches), "--retry-backoff-s", "0", "--skip-task-check"]) == 0
    results = BenchDir(benches / "m").load()
    assert len(results.trials) == 4
    for trial in results.trials.values():
        run = RunDir(benches / "m" / "runs" / trial.trial_id)
        budget_of = run.load_config().budget
        assert (budget_of.max_calls, budget_of.max_tokens) == (9, 5000)  # the same numbers for both scaffolds
        assert trial.status == "ok" and len(trial.curve) >= 3, trial.trial_id
        assert trial.calls <= 9
    report = (benches / "m" / "report.md").read_text()
    assert "B = the bench's per-trial budget: tiny-calc 5,000" in report
    assert "- twin − base · " in report and "n = 2" in report
    assert (benches / "m" / "curve_tiny-calc.png").is_file()


def test_a_bench_written_by_the_previous_results_version_resumes(tmp_path):
    from harness.bench.schema import RESULTS_VERSION, BenchResults, TrialResult, trials_of

    cfg = config(tmp_path)
    old = BenchResults(config=cfg.model_copy(update={"schema_version": 1}), schema_version=1)
    for spec in trials_of(cfg):
        old.trials[spec.trial_id] = TrialResult(
            trial_id=spec.trial_id, task=spec.task_name, model=spec.model, scaffold=spec.scaffold, seed=0, status="ok"
        )
    bench = BenchDir(tmp_path / "benches" / "b")
    bench.root.mkdir(parents=True)
    bench.save(old)
    results = run_bench(cfg, tmp_path / "benches")  # every trial finished: nothing runs
    assert results.trials.keys() == old.trials.keys()
    assert bench.load().schema_version == RESULTS_VERSION


def test_under_a_matched_budget_only_twin_is_bounded_by_rounds(tmp_path):
    from harness.bench.trials import trial_config
    from harness.models.budget import Budget
    from harness.run.directory import MAX_ROUNDS

    def rounds(scaffold: str, **kw) -> int:
        bench = config(tmp_path, **kw)
        spec = TrialSpec(task=plans.TINY_TASK, model=bench.models[0], scaffold=scaffold, seed=0)
        made = trial_config(spec, bench)
        assert made.budget == bench.budget  # the same numbers for every scaffold
        return made.rounds

    matched = {"budget": Budget(max_tokens=10_000)}
    assert rounds("twin", **matched) == 2
    assert rounds("base", **matched) == rounds("mini-swe-agent", **matched) == MAX_ROUNDS
    assert rounds("base") == 2  # no budget to bound it: the bench's rounds


def test_a_stopped_bench_is_saved_interrupted_in_one_line_and_resumes_only_its_unfinished_trials(tmp_path, monkeypatch):
    import harness.bench.run as bench_run
    from ground.errors import Interrupted, StopSignal
    from harness.bench.schema import TrialResult, trials_of

    cfg = config(tmp_path)
    twin, base = trials_of(cfg)
    queues = []

    def stopped_after_one(config, queue, launch, record, env, ledger):  # the executor's stop, in short
        queues.append([spec.trial_id for spec in queue])
        spec = queue.pop(0)
        launch(spec)  # its run directory written; its `twin migrate` stopped (130) before saving a round
        record(spec, 130, time.monotonic(), 0.0)
        raise StopSignal("SIGTERM")

    monkeypatch.setattr(bench_run, "run_locally", stopped_after_one)
    with pytest.raises(Interrupted) as info:
        run_bench(cfg, tmp_path / "benches")
    assert str(info.value) == (
        f"bench b stopped by SIGTERM: 0 trial(s) done, 2 to run or resume; continue with the same twin bench "
        f"command ({tmp_path / 'benches' / 'b'})"
    )
    assert info.value.exit_code == 130
    on_disk = BenchDir(tmp_path / "benches" / "b").load()
    assert (on_disk.status, on_disk.stop_reason) == ("interrupted", "stopped by SIGTERM")
    stopped = on_disk.trials[twin.trial_id]
    assert (stopped.status, stopped.attempts) == ("stopped", 0)  # resumed later, not one of the retries
    assert main(["report", "b", "--benches-dir", str(tmp_path / "benches")]) == 0
    report = (tmp_path / "benches" / "b" / "report.md").read_text()
    assert "> The bench was stopped by SIGTERM before all its trials ended" in report
    assert f"- {twin.trial_id}: stopped (stopped (twin migrate exited 130))" in report

    on_disk.trials[base.trial_id] = TrialResult(
        trial_id=base.trial_id, task=base.task_name, model=base.model, scaffold="base", seed=0, status="ok"
    )
    BenchDir(tmp_path / "benches" / "b").save(on_disk)  # as if the base trial had finished before the stop
    monkeypatch.setattr(bench_run, "run_locally", lambda config, queue, *_: queues.append([s.trial_id for s in queue]))
    again = run_bench(cfg, tmp_path / "benches")
    assert queues == [[twin.trial_id, base.trial_id], [twin.trial_id]]  # the finished trial is kept
    assert again.status == "finished" and BenchDir(tmp_path / "benches" / "b").load().status == "finished"


def test_a_report_says_whether_a_bench_saved_as_running_still_runs_or_was_killed(tmp_path, monkeypatch):
    import harness.bench.run as bench_run

    cfg = config(tmp_path)
    monkeypatch.setattr(bench_run, "run_locally", lambda *_: None)
    run_bench(cfg, tmp_path / "benches")
    bench = BenchDir(tmp_path / "benches" / "b")
    results = bench.load()
    results.status = "running"  # as a `twin bench` saves it while it runs, and leaves it where it is killed
    bench.save(results)
    args = ["report", "b", "--benches-dir", str(tmp_path / "benches")]
    with bench.held():  # a `twin bench` holds it
        assert bench.held_now() and main(args) == 0
    running = (bench.root / "report.md").read_text()
    assert "> The bench is still running: this report holds the trials ended so far." in running
    assert not bench.held_now() and main(args) == 0
    killed = (bench.root / "report.md").read_text()
    assert "> The bench's process ended before its trials did, without saving why (killed)" in killed
    assert "still running" not in killed
