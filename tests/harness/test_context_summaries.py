"""A long conversation stays bounded: older tool outputs are sent as summaries, recorded as sent, replayed alike.

The model is scripted (labelled 'scripted'): this tests the mechanics, not a model's work.
"""

from __future__ import annotations

import json

from harness.run.directory import RunConfig
from harness.run.migration import run_migration
from harness.run.session import RunInputs
from harness.scaffolds.registry import SCAFFOLDS
from task_model.loader import load_task
from tests.harness import loop_scripts as plans


def model_calls(run) -> list[dict]:
    return [json.loads(line) for line in run.trajectory.read_text().splitlines() if '"model_call"' in line]


def test_a_long_conversation_is_summarized_in_the_trajectory_and_a_replay_sends_the_same(tmp_path):
    long = [plans.call("bash", command=f"python3 -c \"print('{i}' * 4000)\"") for i in range(12)]
    replies = [*long, *plans.migrate(plans.OPS_GOOD)]
    script = plans.write_script(tmp_path / "script.json", replies)
    settings = dict(task=plans.TINY_TASK, scaffold="base", rounds=1, sandbox="none", grade=False,
                    context_whole_outputs=2, context_max_chars=20_000)  # fmt: skip
    recorded = RunInputs.create(tmp_path / "a", RunConfig.build(model=script, **settings), load_task(plans.TINY_TASK))
    run_migration(recorded, SCAFFOLDS)
    calls = model_calls(recorded.run)
    last = [m["content"] for m in calls[-1]["request"]["messages"] if m["role"] == "tool"]
    assert sum(text.startswith("[older output of bash, ") for text in last) >= 6  # recorded as sent
    assert last[-1].startswith("wrote ")  # the last turns whole
    replay = RunConfig.build(model=f"replay:{recorded.run.trajectory}", **settings)
    replayed = RunInputs.create(tmp_path / "b", replay, load_task(plans.TINY_TASK))
    run_migration(replayed, SCAFFOLDS)
    again = model_calls(replayed.run)
    assert [c["request"]["messages"] for c in again] == [c["request"]["messages"] for c in calls]
