"""`--scaffold mini-swe-agent`: the package's agent on twin's model client, sandbox, grading and reports.

Scripted replies drive the runs (labelled as such); what is tested is the wiring.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bench.directory import BenchDir
from harness.cli.app import main
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from tests.harness import loop_scripts as plans

pytestmark = [
    # found without importing it: twin's own import is the first, with twin's settings
    pytest.mark.skipif(
        importlib.util.find_spec("minisweagent") is None,
        reason="mini-swe-agent not installed (pip install 'twin-harness[mini]')",
    ),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs use the bwrap sandbox"),
]

REPO = Path(__file__).resolve().parents[2]
WRITE_CALC = (
    "mkdir -p /app/calc && printf '' > /app/calc/__init__.py && cat > /app/calc/ops.py <<'EOF'\n"
    + plans.OPS_BUGGY
    + "EOF\nprintf 'import torch\\n' > /app/calc/legacy.py"  # left behind: twin's import check finds it
)
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def bash(command: str, content: str = "") -> dict:
    return {"content": content, "tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def mini_two_rounds() -> list:
    return [
        bash("ls /source /app; pwd"),
        bash(WRITE_CALC),
        "no tool call in this reply",
        bash("ls /tests /solution; python3 -c 'import torch'"),
        bash(SUBMIT),
        bash("rm /app/calc/legacy.py && sed -i 's/k + 1/k/' /app/calc/ops.py"),
        bash(SUBMIT),
    ]


def run_tiny(tmp_path, replies, **settings) -> RunDir:
    model = plans.write_script(tmp_path / "script.json", replies)
    config = RunConfig.build(task=plans.TINY_TASK, model=model, scaffold="mini-swe-agent", **{"rounds": 2, **settings})
    run = RunDir.create(tmp_path / "runs", config, RunState(run_id="run"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    return run


def records(run: RunDir, kind: str) -> list[dict]:
    return [r for r in map(json.loads, run.trajectory.read_text().splitlines()) if r["type"] == kind]


@pytest.mark.heavy  # two scripted rounds, graded (15-35 s)
def test_two_rounds_in_twins_sandbox_with_the_packages_templates_graded_like_base(tmp_path):
    from harness.scaffolds.mini_swe import default_config

    run = run_tiny(tmp_path, mini_two_rounds())
    state = run.load_state()
    assert state.status == "finished" and state.final_round == 2
    assert [r.note for r in state.rounds] == ["mini-swe-agent exit: Submitted"] * 2
    assert [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]] == [0.5, 1.0]

    calls = records(run, "model_call")
    first = calls[0]["request"]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]
    config = default_config()["agent"]
    assert first["messages"][0]["content"] == config["system_template"].rstrip("\n")  # jinja drops the last newline
    task = (plans.TINY_TASK / "instruction.md").read_text()
    assert first["messages"][1]["content"].startswith(f"Please solve this issue: {task}")
    assert "Linux" in first["messages"][1]["content"]
    # a reply without a tool call gets the package's own format-error message
    assert "No tool calls found in the response" in calls[3]["request"]["messages"][-1]["content"]

    tools = records(run, "tool_call")
    ls, _, boundary, *_ = tools
    assert "/app" in ls["result"] and ls["ok"]
    assert "cannot access '/tests'" in boundary["result"] and "No module named 'torch'" in boundary["result"]
    assert not boundary["ok"]
    assert (run.root / "mini-swe-agent.round-1.traj.json").exists()  # the package's own trajectory too


@pytest.mark.heavy  # a graded mini-swe-agent run (6 s)
def test_budget_stops_the_run_cleanly_and_keeps_the_round(tmp_path):
    run = run_tiny(tmp_path, mini_two_rounds(), budget={"max_calls": 3}, grade=False)
    state = run.load_state()
    assert state.status == "finished" and state.stop_reason.startswith("budget: calls budget exhausted")
    calls = records(run, "model_call")
    assert len(calls) == 3
    assert state.rounds[0].commit and state.rounds[0].note == "stopped by budget"
    task = calls[0]["request"]["messages"][1]["content"]
    assert "# Budget\nThe run has left: 3 model calls." in task  # after the instruction, in the package's {{task}}
    (tool,) = calls[0]["request"]["tools"]
    assert tool["function"]["description"].startswith("Execute a bash command. Each command is stopped after 600 s")


def test_a_run_replays_from_its_trajectory(tmp_path):
    run = run_tiny(tmp_path, mini_two_rounds(), grade=False)
    config = RunConfig.build(
        task=plans.TINY_TASK, model=f"replay:{run.trajectory}", scaffold="mini-swe-agent", rounds=2
    )
    again = RunDir.create(tmp_path / "replays", config, RunState(run_id="replay"))
    run_migration(RunInputs.read(again), SCAFFOLDS)
    assert [g["reward"] for g in json.loads(again.grades.read_text())["rounds"]] == [0.5, 1.0]
    assert all(c["label"].startswith("replayed from") for c in records(again, "model_call"))


def test_unknown_scaffold_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["migrate", "--task", str(plans.TINY_TASK), "--model", "scripted:x.json", "--scaffold", "swe-agent"])
    assert code == 2
    assert "unknown scaffold 'swe-agent': choose twin, base, mini-swe-agent" in capsys.readouterr().err
    code = main(
        [
            "bench",
            "--tasks",
            str(plans.TINY_TASK),
            "--model",
            "m",
            "--scaffold",
            "twin,swe",
            "--benches-dir",
            str(tmp_path),
        ]
    )
    assert code == 2


def test_missing_package_is_a_clear_error(monkeypatch):
    import builtins

    from ground.errors import TwinError
    from harness.scaffolds import mini_swe

    real_import = builtins.__import__

    def no_mini(name, *args, **kwargs):
        if name.startswith("minisweagent"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mini)
    with pytest.raises(TwinError, match=r"pip install 'twin-harness\[mini\]'"):
        mini_swe.default_config()


@pytest.mark.heavy  # a bench of three scaffolds; test_examples has the same bench (heavy too)
def test_bench_runs_three_scaffolds_and_the_report_shows_them_side_by_side(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    plans.write_script(folder / "tiny-calc-twin.json", plans.twin_fix_in_round_two())
    plans.write_script(folder / "tiny-calc-base.json", plans.base_two_rounds())
    plans.write_script(folder / "tiny-calc-mini-swe-agent.json", mini_two_rounds())
    benches = tmp_path / "benches"
    code = main(
        [
            "bench",
            "--tasks",
            str(plans.TINY_TASK),
            "--model",
            f"scripted:{folder}/{{task}}-{{scaffold}}.json",
            "--scaffold",
            "twin,base,mini-swe-agent",
            "--rounds",
            "2",
            "--name",
            "three",
            "--benches-dir",
            str(benches),
            "--retry-backoff-s",
            "0",
        ]
    )
    assert code == 0
    results = BenchDir(benches / "three").load()
    by_scaffold = {t.scaffold: t for t in results.trials.values()}
    assert set(by_scaffold) == {"twin", "base", "mini-swe-agent"}
    assert all(t.status == "ok" for t in by_scaffold.values())
    assert by_scaffold["mini-swe-agent"].snapshot_rewards == {1: 0.5, 2: 1.0}
    report = (benches / "three" / "report.md").read_text()
    for scaffold in ("twin", "base", "mini-swe-agent"):
        assert f"| {scaffold} | 0.5000 ± 0.0000 | 1.0000 ± 0.0000 |" in report
    assert "## Harness − mini-swe-agent, paired per task (R=2)" in report
    assert "scaffolds: twin, base, mini-swe-agent" in report


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bundled_mini_swe_agent_example_replays_and_grades(tmp_path):
    recording = REPO / "examples" / "mlp-train" / "mini-swe-agent.jsonl"
    task = REPO / "tasks" / "t2j-mini" / "mlp-train"
    config = RunConfig.build(task=task, model=f"replay:{recording}", scaffold="mini-swe-agent", rounds=2)
    run = RunDir.create(tmp_path, config, RunState(run_id="replay"))
    run_migration(RunInputs.read(run), SCAFFOLDS)
    rewards = [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]]
    assert rewards[0] < rewards[1] and rewards[1] >= 0.97  # round 1's seeded defect, repaired in round 2


@pytest.mark.heavy  # a graded mini-swe-agent run (6 s)
def test_commands_no_process_can_take_are_errors_shown_to_the_agent(tmp_path):
    replies = [
        bash("echo a\0b"),
        bash("echo \ud800"),
        bash("x" * 200_000),
        bash(WRITE_CALC),
        bash(SUBMIT),
        bash(SUBMIT),
    ]
    run = run_tiny(tmp_path, replies)
    state = run.load_state()
    assert state.status == "finished", state.stop_reason
    refused = [r for r in records(run, "tool_call") if not r["ok"]]
    assert [r["result"].split(":")[0] for r in refused[:3]] == ["error"] * 3
    assert json.loads(run.grades.read_text())["rounds"][0]["reward"] is not None


POISONED = {
    "MSWEA_MODEL_NAME": "poisoned/model",
    "MSWEA_GLOBAL_COST_LIMIT": "0.000001",
    "MSWEA_GLOBAL_CALL_LIMIT": "1",
    "OPENAI_API_BASE": "http://poisoned.invalid/v1",
}
SETTINGS_SEEN = [*POISONED, "MSWEA_GLOBAL_CONFIG_DIR", "MSWEA_CONFIG_DIR", "MSWEA_SILENT_STARTUP"]
RUN_THEN_SHOW_SETTINGS = f"""
import json, os, sys
from pathlib import Path
from harness.run.migration import run_migration
from harness.scaffolds.registry import SCAFFOLDS
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.session import RunInputs

task, model, runs = sys.argv[1:]
assert "minisweagent" not in sys.modules
config = RunConfig.build(task=task, model=model, scaffold="mini-swe-agent", rounds=2)
run = RunDir.create(Path(runs), config, RunState(run_id="run"))
run_migration(RunInputs.read(run), SCAFFOLDS)
import minisweagent
env = {{name: os.environ.get(name) for name in {SETTINGS_SEEN!r}}}
print(json.dumps({{"run": str(run.root), "package_dir": str(minisweagent.global_config_dir), "env": env}}))
"""


@pytest.mark.heavy  # a whole run
def test_a_users_own_mini_swe_agent_settings_have_no_effect(tmp_path):
    """A user's config folder with another model, cost and call limits, a base URL and its
    own `mini.yaml`: none of it reaches the run or twin's process, and the user's variable
    is as it was afterwards. A fresh process, since the package reads them at import."""
    user = tmp_path / "user-mini-config"
    user.mkdir()
    (user / ".env").write_text("".join(f"{name}='{value}'\n" for name, value in POISONED.items()))
    (user / "mini.yaml").write_text(
        "agent:\n  system_template: POISONED\n  instance_template: POISONED\n  step_limit: 1\n"
        "  cost_limit: 0.000001\nmodel:\n  model_name: poisoned/model\n"
    )
    before = sorted(p.name for p in user.iterdir())
    model = plans.write_script(tmp_path / "script.json", mini_two_rounds())
    env = {k: v for k, v in os.environ.items() if k not in POISONED and not k.startswith("MSWEA_")}
    env |= {"MSWEA_GLOBAL_CONFIG_DIR": str(user), "MSWEA_CONFIG_DIR": str(user)}
    done = subprocess.run(
        [sys.executable, "-c", RUN_THEN_SHOW_SETTINGS, str(plans.TINY_TASK), model, str(tmp_path / "runs")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    run = RunDir(Path(seen["run"]))
    state = run.load_state()
    assert state.status == "finished" and [r.note for r in state.rounds] == ["mini-swe-agent exit: Submitted"] * 2
    assert [g["reward"] for g in json.loads(run.grades.read_text())["rounds"]] == [0.5, 1.0]
    calls = records(run, "model_call")
    assert len(calls) == len(mini_two_rounds()) and all(c["label"] == "scripted" for c in calls)
    from harness.scaffolds.mini_swe import default_config

    assert calls[0]["request"]["messages"][0]["content"] == default_config()["agent"]["system_template"].rstrip("\n")
    assert "POISONED" not in run.trajectory.read_text()

    assert Path(seen["package_dir"]) != user and user not in Path(seen["package_dir"]).parents
    assert seen["env"] == {
        **dict.fromkeys(POISONED),
        "MSWEA_GLOBAL_CONFIG_DIR": str(user),  # the user's variable, as it was
        "MSWEA_CONFIG_DIR": str(user),
        "MSWEA_SILENT_STARTUP": None,
    }
    assert sorted(p.name for p in user.iterdir()) == before


@pytest.mark.heavy  # two scripted rounds, graded (15-35 s)
def test_a_reply_over_the_tool_call_cap_runs_none_of_its_commands(tmp_path):
    from roles.tools import MAX_TOOL_CALLS_PER_REPLY

    many = {"content": "", "tool_calls": [
        {"name": "bash", "arguments": {"command": f"touch /app/n{i}"}} for i in range(MAX_TOOL_CALLS_PER_REPLY + 1)
    ]}  # fmt: skip
    run = run_tiny(tmp_path, [many, bash(WRITE_CALC), bash(SUBMIT), bash(SUBMIT)])
    assert run.load_state().status == "finished"
    commands = [r["arguments"].get("command", "") for r in records(run, "tool_call")]
    assert not any(c.startswith("touch /app/n") for c in commands), commands
    assert any("calc/ops.py" in c for c in commands)


def test_an_agent_that_submitted_with_nothing_failing_is_not_asked_again(tmp_path):
    write_good = (
        "mkdir -p /app/calc && printf '' > /app/calc/__init__.py && cat > /app/calc/ops.py <<'EOF'\n"
        + plans.OPS_GOOD
        + "EOF"
    )
    run = run_tiny(tmp_path, [bash(write_good), bash(SUBMIT), bash(SUBMIT)], grade=False)
    state = run.load_state()
    assert [r.round for r in state.rounds] == [1] and state.rounds[0].agent_submitted
    assert state.stop_reason == "round 1: the agent submitted and twin's candidate-side checks found nothing violated"
    assert len(records(run, "model_call")) == 2  # the third reply was never asked for


def test_after_a_submit_the_next_round_is_told_the_failing_check(tmp_path):
    run = run_tiny(tmp_path, mini_two_rounds(), grade=False)
    tasks = [
        c["request"]["messages"][1]["content"] for c in records(run, "model_call") if len(c["request"]["messages"]) == 2
    ]
    assert len(tasks) == 2
    assert "calc.legacy" in tasks[1] and "Continue working on the task" not in tasks[1]
