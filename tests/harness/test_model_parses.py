"""Each command parses its model name once: `twin migrate` (new, resumed, with a new wait) and `twin bench`.

The name is read by `harness.models.config.parse_model_name` when a `ModelConfig` is
made; everything after that (building the model, labelling it, resuming it, closing
lines) asks the config's parsed kind. A second parse means some step went back to the
string: these tests count the parses of every command and fail on two.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

import harness.bench.executors
import harness.models.config
from harness.bench.run import run_bench
from harness.bench.schema import BenchConfig
from harness.cli.app import main
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="whole runs use the real bwrap sandbox")


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """Every model name parsed, wherever from, counted by name."""
    counts: Counter = Counter()
    parse = harness.models.config.parse_model_name

    def counting(name: str):
        counts[name] += 1
        return parse(name)

    monkeypatch.setattr(harness.models.config, "parse_model_name", counting)
    return counts


def test_twin_migrate_parses_its_model_name_once_new_resumed_or_rewaited(tmp_path, parses):
    model = plans.write_script(tmp_path / "script.json", plans.base_two_rounds())
    runs = str(tmp_path / "runs")
    new = ["migrate", "--task", str(plans.TINY_TASK), "--model", model, "--scaffold", "base", "--rounds", "2"]
    assert main([*new, "--no-grade", "--runs-dir", runs, "--run-id", "r"]) == 0
    assert parses == {model: 1}
    for resumed in (["--resume", "r"], ["--resume", "r", "--model-wait-s", "9"]):
        parses.clear()
        assert main(["migrate", *resumed, "--runs-dir", runs]) == 0
        assert parses == {model: 1}


@pytest.mark.heavy  # a bench of one trial, graded
def test_twin_bench_parses_each_trials_model_name_once_and_its_migrate_once(tmp_path, parses, monkeypatch):
    folder = tmp_path / "scripts"
    folder.mkdir()
    plans.write_script(folder / "tiny-calc-base.json", plans.base_two_rounds())
    name = f"scripted:{folder}/tiny-calc-base.json"
    in_trials: list[Counter] = []

    def trial_in_this_process(_processes, command: list[str], log, env) -> tuple[int, float]:
        assert command[3:5] == ["migrate", "--resume"]  # the bench wrote the trial's config; the trial resumes it
        before = Counter(parses)
        code = main(command[3:])
        in_trials.append(Counter(parses) - before)
        return code, 0.0

    monkeypatch.setattr(harness.bench.executors.TrialProcesses, "run", trial_in_this_process)  # the local pool's
    config = BenchConfig(
        name="b",
        tasks=[plans.TINY_TASK],
        models=[f"scripted:{folder}/{{task}}-{{scaffold}}.json"],
        scaffolds=["base"],
        rounds=2,
        retry_backoff_s=0,
    )
    results = run_bench(config, tmp_path / "benches")
    assert [t.status for t in results.trials.values()] == ["ok"]
    assert in_trials == [Counter({name: 1})]
    assert parses - in_trials[0] == Counter({name: 1})  # the bench itself, writing the trial's config
