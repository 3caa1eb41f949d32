"""Record a run through litellm and a fake server, then replay it without any server."""

from __future__ import annotations

import json

import pytest

from ground.errors import TwinError
from ground.model import ReplayDivergence
from ground.trajectory import ModelCallRecord, ModelErrorRecord, Trajectory
from harness.models.config import ModelConfig
from harness.models.factory import make_model
from harness.models.replay import ReplayModel
from tests.fakes import FakeOpenAIServer, text, tool_call

SYSTEM = "You migrate PyTorch code to JAX."
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("read_file", "bash")
]


def tiny_loop(
    model, *, task="Port model.py", tool_output="took 0.31 s", role="migrator", tools=TOOLS
):
    """A two-role miniature of the agent loop: enough history to replay."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    while True:
        reply = model.query(messages, tools, role=role)
        messages.append(reply.as_message())
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_output})
    verdict = model.query(
        [{"role": "user", "content": "verify: " + reply.content}], role="verifier"
    )
    return reply.content, verdict.content


@pytest.fixture
def recording(tmp_path):
    """A trajectory of 3 model calls (tool call, answer, verifier) recorded live."""
    path = tmp_path / "live" / "trajectory.jsonl"
    scripted = [
        tool_call("read_file", {"path": "/source/model.py"}, id="call_1", prompt_tokens=30),
        text("ported", prompt_tokens=50, completion_tokens=7),
        text("looks right", prompt_tokens=20),
    ]
    with FakeOpenAIServer(scripted) as server:
        config = ModelConfig(name="openai/fake-local", api_base=server.base_url)
        model = make_model(config, api_key="sk-dummy", trajectory=Trajectory(path))
        result = tiny_loop(model)
    assert result == ("ported", "looks right")
    return path


def test_replay_round_trip_reproduces_the_run_without_a_server(recording, tmp_path):
    new = Trajectory(tmp_path / "replayed" / "trajectory.jsonl")
    model = make_model(ModelConfig(name=f"replay:{recording}"), trajectory=new)
    assert model.label == f"replayed from {recording}"
    # Tool results (timings) may differ; they are not compared.
    assert tiny_loop(model, tool_output="took 0.97 s") == ("ported", "looks right")
    assert model.inner.remaining == 0
    original = Trajectory(recording).model_calls()
    replayed = new.model_calls()
    assert [r.role for r in replayed] == ["migrator", "migrator", "verifier"]
    assert [r.reply.content for r in replayed] == [r.reply.content for r in original]
    assert [r.reply.usage for r in replayed] == [r.reply.usage for r in original]
    assert all(r.reply.cost_usd == 0.0 for r in replayed)
    assert all(r.label.startswith("replayed from") for r in replayed)


def test_replay_accepts_a_run_directory(recording):
    assert make_model(ModelConfig(name=f"replay:{recording.parent}")).inner.path == recording


def test_changed_user_text_says_where(recording):
    with pytest.raises(ReplayDivergence) as info:
        tiny_loop(make_model(ModelConfig(name=f"replay:{recording}")), task="Port layers.py")
    message = str(info.value)
    assert message.startswith("replay diverged at call 0 (role migrator), message 1 (user)")
    assert "'Port model.py'" in message and "'Port layers.py'" in message


def test_changed_role_diverges(recording):
    with pytest.raises(
        ReplayDivergence, match="call 0 .*role: expected 'migrator', got 'diagnoser'"
    ):
        tiny_loop(make_model(ModelConfig(name=f"replay:{recording}")), role="diagnoser")


def test_changed_tools_diverge(recording):
    with pytest.raises(ReplayDivergence, match=r"tools: expected \['read_file', 'bash'\]"):
        tiny_loop(make_model(ModelConfig(name=f"replay:{recording}")), tools=TOOLS[:1])


def test_changed_tool_call_id_diverges_at_the_second_call(recording):
    model = ReplayModel(recording)
    calls = Trajectory(recording).model_calls()
    first = model.query(calls[0].request.messages, TOOLS, role="migrator")
    messages = [*calls[0].request.messages, first.as_message()]
    messages.append({"role": "tool", "tool_call_id": "call_other", "content": "x"})
    with pytest.raises(ReplayDivergence, match="call 1 .*message 3 .tool.: tool_call_id"):
        model.query(messages, TOOLS, role="migrator")


def test_extra_message_diverges(recording):
    model = ReplayModel(recording)
    request = Trajectory(recording).model_calls()[0].request
    with pytest.raises(ReplayDivergence, match="expected 2 messages, got 3"):
        model.query(
            [*request.messages, {"role": "user", "content": "more"}], TOOLS, role="migrator"
        )


def test_running_past_the_recording_diverges(recording, tmp_path):
    trajectory = Trajectory(tmp_path / "t.jsonl")
    model = make_model(ModelConfig(name=f"replay:{recording}"), trajectory=trajectory)
    tiny_loop(model)
    with pytest.raises(ReplayDivergence, match="call 3 .*ends after 3 model calls"):
        model.query([{"role": "user", "content": "again"}], role="verifier")
    last = trajectory.records()[-1]
    assert isinstance(last, ModelErrorRecord) and last.kind == "replay"


def test_missing_or_empty_recording_is_a_clear_error(tmp_path):
    with pytest.raises(TwinError, match="no trajectory"):
        make_model(ModelConfig(name=f"replay:{tmp_path / 'absent.jsonl'}"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TwinError, match="no model calls"):
        make_model(ModelConfig(name=f"replay:{empty}"))
    with pytest.raises(TwinError, match="needs a path"):
        make_model(ModelConfig(name="replay:"))


def test_recorded_request_is_what_was_sent(recording):
    records = Trajectory(recording).records()
    assert all(isinstance(r, ModelCallRecord) for r in records)
    second = records[1].request.messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert json.loads(second[2]["tool_calls"][0]["function"]["arguments"]) == {
        "path": "/source/model.py"
    }


def test_resumed_replay_continues_from_a_later_call(recording):
    calls = Trajectory(recording).model_calls()
    model = make_model(ModelConfig(name=f"replay:{recording}"), start=2)
    assert model.query(calls[2].request.messages, role="verifier").content == "looks right"
    with pytest.raises(TwinError, match="cannot start at call 4; .* records 3 calls"):
        make_model(ModelConfig(name=f"replay:{recording}"), start=4)


def test_measured_numbers_in_user_text_may_differ_but_words_and_counts_may_not(tmp_path):
    from harness.models.replay import request_difference

    path = tmp_path / "trajectory.jsonl"
    model = make_model(ModelConfig(name="scripted:" + str(_script(tmp_path))), trajectory=Trajectory(path))
    model.query([{"role": "user", "content": "round 2: forward score=0.9330 noise_floor=4.59e-13"}])
    (recorded,) = Trajectory(path).model_calls()

    def differs(text):
        return request_difference(recorded, [{"role": "user", "content": text}], None, "agent")

    assert differs("round 2: forward score=0.9329 noise_floor=4.61e-13") is None
    assert "character 6" in differs("round 3: forward score=0.9330 noise_floor=4.59e-13")
    assert differs("round 2: forward score=established noise_floor=4.59e-13") is not None
    assert differs("round 2: logits score=0.9330 noise_floor=4.59e-13") is not None


def _script(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["ok"]))
    return script


def _call(index, role, messages, round=1):
    from ground.model import ModelReply
    from ground.trajectory import ModelRequest

    return ModelCallRecord(
        index=index, role=role, round=round, model="m", request=ModelRequest(messages=messages), reply=ModelReply()
    )


def test_a_resumed_runs_cut_off_turn_is_left_out_of_the_replay():
    from harness.models.replay import kept_calls

    start = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    later = [*start, {"role": "assistant", "content": "a"}, {"role": "tool", "tool_call_id": "1", "content": "t"}]
    calls = [
        _call(0, "diagnoser", start),
        _call(1, "migrator", start),
        _call(2, "migrator", later),  # cut off after this call
        _call(3, "migrator", start),  # the resumed run starts the turn over
        _call(4, "migrator", later),
        _call(5, "verifier", start),
        _call(6, "migrator", start, round=2),  # a new round's turn is not a restart
        _call(7, "migrator", [*start[:1], {"role": "user", "content": "other"}], round=2),  # another conversation
    ]
    assert [c.index for c in kept_calls(calls)] == [0, 3, 4, 5, 6, 7]


def test_resume_position_counts_the_kept_calls_of_finished_steps():
    from harness.models.replay import resume_position

    start = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    later = [*start, {"role": "assistant", "content": "a"}]
    diagnosed = [_call(0, "diagnoser", start)]
    cut_twice = [
        *diagnosed,
        _call(1, "migrator", start),
        _call(2, "migrator", later),  # first attempt, cut off
        _call(3, "migrator", start),
        _call(4, "migrator", later),
        # the second attempt, cut off as well
        _call(5, "migrator", [*later, {"role": "tool", "tool_call_id": "x", "content": "t"}]),
    ]
    assert resume_position([], {}) == 0
    assert resume_position(diagnosed, {1: ["diagnose"]}) == 1
    assert resume_position(cut_twice, {1: ["diagnose"]}) == 1
    assert resume_position(cut_twice[:5], {1: ["diagnose", "migrate"]}) == 3
    assert resume_position([_call(0, "agent", start), _call(1, "agent", later)], {}) == 0
