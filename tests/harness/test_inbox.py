"""The inbox protocol: requests written atomically, replies checked against the tools, retry, stop."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ground.errors import TwinError
from ground.model import ModelStopped
from ground.trajectory import Trajectory
from harness.models.budget import Budget, BudgetTracker
from harness.models.config import ModelConfig
from harness.models.factory import make_model
from harness.models.inbox import InboxModel, MalformedReply, parse_reply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "parameters": {
                "type": "object",
                "properties": {
                    "diagnosis": {
                        "$defs": {"Gap": {"type": "object", "properties": {"title": {"type": "string"}}}},
                        "type": "object",
                        "properties": {"gaps": {"type": "array", "items": {"$ref": "#/$defs/Gap"}}},
                        "required": ["gaps"],
                    }
                },
                "required": ["diagnosis"],
            },
        },
    },
]
MESSAGES = [{"role": "system", "content": "be careful"}, {"role": "user", "content": "migrate calc"}]


def call(name, arguments, id="c1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_good_reply_parses_with_string_or_object_arguments_and_generated_ids():
    reply = parse_reply(
        {
            "role": "assistant",
            "content": "writing",
            "tool_calls": [
                call("write_file", json.dumps({"path": "/app/a.py", "content": "x = 1\n"})),
                {"function": {"name": "submit", "arguments": {"diagnosis": {"gaps": [{"title": "t"}]}}}},
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        },
        TOOLS,
        n=4,
    )
    assert reply.content == "writing"
    assert [(c.id, c.name) for c in reply.tool_calls] == [("c1", "write_file"), ("inbox_4_1", "submit")]
    assert reply.tool_calls[0].arguments == {"path": "/app/a.py", "content": "x = 1\n"}
    assert reply.usage.total_tokens == 10
    assert parse_reply({"content": "only text"}, TOOLS, 1).tool_calls == []


def test_a_call_id_used_earlier_in_the_conversation_is_refused():
    earlier = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call("write_file", "{}", id="c1")]}]
    reply = {"tool_calls": [call("write_file", {"path": "/a", "content": ""}, id="c1")]}
    with pytest.raises(MalformedReply, match=r"\['c1'\] were used earlier"):
        parse_reply(reply, TOOLS, 2, earlier)
    assert parse_reply(reply, TOOLS, 2, MESSAGES).tool_calls[0].id == "c1"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"role": "user", "content": "x"}, "role must be 'assistant'"),
        ({"content": 3}, "content must be a string"),
        ({"content": "", "tool_calls": []}, "neither content nor tool_calls"),
        ({"tool_calls": {"a": 1}}, "tool_calls must be a list"),
        ({"tool_calls": ["bash"]}, "tool_calls[0] must be"),
        ({"tool_calls": [call("bash", "{}")]}, "no tool named 'bash'"),
        ({"tool_calls": [call("write_file", "{not json")]}, "arguments are not JSON"),
        ({"tool_calls": [call("write_file", "[1, 2]")]}, "arguments must be a JSON object"),
        ({"tool_calls": [call("write_file", {"path": "/app/a"})]}, "missing argument(s) ['content']"),
        (
            {"tool_calls": [call("write_file", {"path": "/a", "content": "", "mode": 1})]},
            "unknown argument(s) ['mode']",
        ),
        ({"tool_calls": [call("write_file", {"path": 3, "content": ""})]}, "path: 3 is not of type 'string'"),
        ({"tool_calls": [call("submit", {"diagnosis": {"gaps": [{"title": 5}]}})]}, "diagnosis.gaps.0.title"),
        ({"tool_calls": [call("submit", {"diagnosis": {}})]}, "'gaps' is a required property"),
        (
            {
                "tool_calls": [
                    call("write_file", {"path": "/a", "content": ""}),
                    call("write_file", {"path": "/b", "content": ""}),
                ]
            },
            "ids must be unique",
        ),
        ({"content": "x", "usage": {"prompt_tokens": "many"}}, "usage must be"),
        ({"content": "x", "usage": {"prompt_tokens": 5, "completion_tokens": -1_000_000}}, "0 or more"),
        ({"content": "x", "usage": {"prompt_tokens": -3}}, "0 or more"),
        ({"content": "x", "usage": {"cached_tokens": -1}}, "0 or more"),
    ],
)
def test_malformed_replies_are_refused_with_the_reason(data, fragment):
    with pytest.raises(MalformedReply) as info:
        parse_reply(data, TOOLS, 1)
    assert fragment in str(info.value)


def answer(folder, n, reply, *, delay=0.05):
    """Write reply-<n>.json the way a program should: temp name, then rename."""

    def run():
        path = folder / f"request-{n}.json"
        while not path.exists():
            time.sleep(0.01)
        time.sleep(delay)
        tmp = folder / f".reply-{n}.tmp"
        tmp.write_text(json.dumps(reply) if not isinstance(reply, str) else reply)
        tmp.replace(folder / f"reply-{n}.json")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_request_holds_role_round_call_tools_and_budget_and_the_reply_comes_back(tmp_path, capsys):
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    trajectory.set_context(round=2, step=3)
    budget = BudgetTracker(Budget(max_calls=10, max_tokens=1000))
    model = InboxModel(tmp_path / "inbox", wait_s=5, start=7, trajectory=trajectory, budget=budget)
    thread = answer(
        model.folder, 1, {"content": "", "tool_calls": [call("write_file", {"path": "/a", "content": "b"})]}
    )
    reply = model.query(MESSAGES, TOOLS, role="migrator")
    thread.join()
    request = json.loads((model.folder / "request-1.json").read_text())
    assert request["protocol"] == "twin-inbox/1" and request["reply_to"] == "reply-1.json"
    assert (request["n"], request["call"], request["role"], request["round"], request["step"]) == (
        1,
        7,
        "migrator",
        2,
        3,
    )
    assert request["messages"] == MESSAGES and request["tools"] == TOOLS
    assert request["budget_left"] == {"tokens": 1000, "usd": None, "calls": 10, "wall_s": None}
    assert reply.tool_calls[0].arguments == {"path": "/a", "content": "b"}
    assert model.call == 8 and model.n == 2
    assert not [p for p in model.folder.iterdir() if p.name.startswith(".")]  # no temporary file left
    assert "twin: read reply-1.json after " in capsys.readouterr().err  # the program sees its reply was taken


def test_malformed_reply_gets_one_retry_with_the_error_written(tmp_path):
    model = InboxModel(tmp_path, wait_s=5)
    first = answer(tmp_path, 1, "{broken")
    reply_holder = {}

    def second():
        first.join()
        while not (tmp_path / "error-1.json").exists():
            time.sleep(0.01)
        answer(tmp_path, 1, {"content": "fixed"}, delay=0).join()

    thread = threading.Thread(target=second)
    thread.start()
    reply_holder["reply"] = model.query(MESSAGES, TOOLS, role="agent")
    thread.join()
    assert reply_holder["reply"].content == "fixed"
    error = json.loads((tmp_path / "error-1.json").read_text())
    assert error["attempt"] == 1 and error["retry"] is True and "not JSON" in error["error"]
    assert (tmp_path / "reply-1.rejected.json").read_text() == "{broken"
    assert json.loads((tmp_path / "request-1.json").read_text())["attempt"] == 2


def test_two_malformed_replies_stop_the_run(tmp_path):
    model = InboxModel(tmp_path, wait_s=5)

    def program():
        answer(tmp_path, 1, {"content": "", "tool_calls": [call("rm", "{}")]}).join()
        while not (tmp_path / "error-1.json").exists():
            time.sleep(0.01)
        answer(tmp_path, 1, {"content": ""}, delay=0).join()

    thread = threading.Thread(target=program)
    thread.start()
    with pytest.raises(ModelStopped, match="malformed twice"):
        model.query(MESSAGES, TOOLS, role="agent")
    thread.join()
    error = json.loads((tmp_path / "error-1.json").read_text())
    assert error["attempt"] == 2 and error["retry"] is False
    assert (tmp_path / "expired-1.json").exists() and not (tmp_path / "request-1.json").exists()


def test_no_reply_in_time_stops_and_expires_the_request_and_numbers_never_repeat(tmp_path, capsys):
    model = InboxModel(tmp_path, wait_s=0.3)
    with pytest.raises(ModelStopped, match="no reply-1.json within 0.3 s"):
        model.query(MESSAGES, TOOLS, role="verifier")
    assert f"waiting for {tmp_path / 'reply-1.json'} (verifier" in capsys.readouterr().err
    assert (tmp_path / "expired-1.json").exists()
    # a request left unanswered by a killed process is expired; the next number is new
    (tmp_path / "request-2.json").write_text("{}")
    again = InboxModel(tmp_path, wait_s=0.1)
    assert (tmp_path / "expired-2.json").exists() and not (tmp_path / "request-2.json").exists()
    assert again.n == 3


def test_inbox_through_the_factory_is_metered_and_labelled(tmp_path):
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    model = make_model(ModelConfig(name=f"inbox:{tmp_path / 'box'}", wait_s=5), trajectory=trajectory)
    thread = answer(tmp_path / "box", 1, {"content": "hello", "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
    model.query(MESSAGES, TOOLS, role="agent")
    thread.join()
    record = trajectory.model_calls()[0]
    assert record.model == f"inbox:{tmp_path / 'box'}" and record.label.startswith("outside program via inbox")
    with pytest.raises(ModelStopped):
        config = ModelConfig(name=f"inbox:{tmp_path / 'box'}", wait_s=0.1)
        make_model(config, trajectory=trajectory).query(MESSAGES, TOOLS)
    assert [r.kind for r in trajectory.records() if r.type == "model_error"] == ["stopped"]


@pytest.mark.parametrize("name", ["inbox:", "inbox:  "])
def test_inbox_without_a_folder_is_refused(name):
    with pytest.raises(TwinError, match="inbox: needs a path"):
        make_model(ModelConfig(name=name))


def test_non_positive_wait_is_refused(tmp_path):
    with pytest.raises(TwinError, match="wait time must be > 0"):
        InboxModel(tmp_path, wait_s=0)


def test_the_driver_in_the_docs_is_the_tested_example_driver():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    docs = (repo / "docs" / "models.md").read_text()
    block = docs.split("```python\n", 1)[1].split("```", 1)[0]
    source = (repo / "examples" / "inbox_driver.py").read_text()
    assert source.split('"""\n\n', 1)[1] == block
    assert len(block.splitlines()) <= 32


def test_migrate_refuses_an_unusable_inbox_before_making_a_run(tmp_path, capsys):
    from harness.cli.app import main
    from tests.harness import loop_scripts as plans

    (tmp_path / "file").write_text("")
    runs = tmp_path / "runs"
    code = main(
        ["migrate", "--task", str(plans.TINY_TASK), "--model", f"inbox:{tmp_path / 'file'}", "--runs-dir", str(runs)]
    )
    assert code == 2 and "inbox: cannot use" in capsys.readouterr().err
    assert not runs.exists()


def test_a_directory_in_place_of_the_request_stops_the_run_with_one_line(tmp_path):
    model = InboxModel(tmp_path, wait_s=5)
    (tmp_path / "request-1.json").mkdir()  # made by the program after twin started
    with pytest.raises(ModelStopped, match=r"cannot write request-1\.json .*remove what is in its place"):
        model.query(MESSAGES, TOOLS, role="agent")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_refused_reply_that_cannot_be_set_aside_stops_the_run_with_one_line(tmp_path):
    """A directory reply is refused; a non-empty directory where it would be set aside stops the run."""
    model = InboxModel(tmp_path, wait_s=5)
    (tmp_path / "reply-1.rejected.json").mkdir()
    (tmp_path / "reply-1.rejected.json" / "x").write_text("")
    (tmp_path / "reply-1.json").mkdir()
    with pytest.raises(ModelStopped, match=r"cannot set the refused reply-1\.json aside"):
        model.query(MESSAGES, TOOLS, role="agent")
    assert not (tmp_path / "error-1.json").exists()  # stopped before a retry was offered
    assert (tmp_path / "expired-1.json").exists()
