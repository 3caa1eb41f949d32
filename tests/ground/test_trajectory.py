from __future__ import annotations

import json
import multiprocessing
import threading

import pytest
from pydantic import ValidationError

from ground.model import ModelReply, ToolCall, Usage
from ground.trajectory import (
    MAX_TOOL_RESULT_CHARS,
    SCHEMA_VERSION,
    ModelCallRecord,
    ModelErrorRecord,
    ModelRequest,
    ToolCallRecord,
    Trajectory,
    TrajectoryError,
)


def call_record(index: int = 0, role: str = "migrator", content: str = "ok") -> ModelCallRecord:
    return ModelCallRecord(
        index=index,
        role=role,
        model="openai/x",
        request=ModelRequest(messages=[{"role": "user", "content": "go"}]),
        reply=ModelReply(
            content=content,
            tool_calls=[ToolCall(id="c1", name="read_file", arguments={"path": "/app"})],
            usage=Usage(prompt_tokens=3, completion_tokens=4),
            cost_usd=0.5,
        ),
    )


def tool_record(n: int = 0, result: str = "fine") -> ToolCallRecord:
    return ToolCallRecord(role="migrator", tool="bash", arguments={"n": n}, result=result)


def test_round_trip_keeps_types_and_fields(tmp_path):
    trajectory = Trajectory(tmp_path / "run" / "trajectory.jsonl")
    trajectory.set_context(round=2, step=5)
    first = call_record().model_copy(update={"round": 2, "step": 5})
    trajectory.append(first)
    trajectory.append(tool_record())
    trajectory.append(ModelErrorRecord(role="verifier", model="m", kind="infra", error="429"))
    records = trajectory.records()
    assert [type(r) for r in records] == [ModelCallRecord, ToolCallRecord, ModelErrorRecord]
    assert records[0] == first
    assert records[0].schema_version == SCHEMA_VERSION
    assert trajectory.model_calls() == [first]
    lines = trajectory.path.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "model_call",
        "tool_call",
        "model_error",
    ]


def test_missing_file_reads_as_empty(tmp_path):
    assert Trajectory(tmp_path / "nothing.jsonl").records() == []


def test_torn_last_line_is_skipped_and_cut_by_the_next_append(tmp_path):
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    trajectory.append(tool_record(0))
    with open(trajectory.path, "a") as handle:
        handle.write('{"type": "tool_call", "role": "migr')  # a writer killed mid-line
    assert len(trajectory.records()) == 1
    trajectory.append(tool_record(1))
    records = trajectory.records()
    assert [r.arguments["n"] for r in records] == [0, 1]
    assert trajectory.path.read_text().count("\n") == 2


def test_torn_only_line_is_cut_entirely(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"type": "tool')
    trajectory = Trajectory(path)
    assert trajectory.records() == []
    trajectory.append(tool_record(7))
    assert [r.arguments["n"] for r in trajectory.records()] == [7]


def test_corrupt_finished_line_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    trajectory = Trajectory(path)
    trajectory.append(tool_record())
    with open(path, "a") as handle:
        handle.write("not json\n")
    with pytest.raises(TrajectoryError, match=r"trajectory.jsonl:2: not a JSON line"):
        trajectory.records()


def test_unknown_record_type_is_an_error(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    path.write_text('{"type": "mystery", "role": "x"}\n')
    with pytest.raises(TrajectoryError, match=":1: not a trajectory record"):
        Trajectory(path).records()


def test_newer_format_asks_for_an_upgrade(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    record = json.loads(tool_record().model_dump_json())
    record["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(TrajectoryError, match="upgrade twin"):
        Trajectory(path).records()


def test_long_tool_result_keeps_head_and_tail():
    result = "H" * MAX_TOOL_RESULT_CHARS + "M" * 5000 + "T" * MAX_TOOL_RESULT_CHARS
    stored = tool_record(result=result).result
    assert len(stored) < MAX_TOOL_RESULT_CHARS + 100
    assert stored.startswith("H") and stored.endswith("T")
    assert "characters cut" in stored
    assert tool_record(result="short").result == "short"


def test_context_labels_are_validated(tmp_path):
    trajectory = Trajectory(tmp_path / "t.jsonl")
    trajectory.set_context(round=1)
    trajectory.set_context(step=3)
    assert (trajectory.context.round, trajectory.context.step) == (1, 3)
    with pytest.raises(ValidationError):
        trajectory.set_context(rnd=2)


def test_model_call_index_continues_after_reopening(tmp_path):
    path = tmp_path / "t.jsonl"
    first = Trajectory(path)
    for _ in range(2):
        first.append(call_record(index=first.next_model_call_index()))
    first.append(tool_record())
    reopened = Trajectory(path)
    assert reopened.next_model_call_index() == 2
    assert reopened.next_model_call_index() == 3


def test_threads_append_whole_lines(tmp_path):
    trajectory = Trajectory(tmp_path / "t.jsonl")
    big = "x" * 100_000  # far above the size the kernel writes atomically to pipes

    def writer(worker: int) -> None:
        for i in range(20):
            trajectory.append(call_record(index=worker * 100 + i, content=big))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = trajectory.records()
    assert sorted(r.index for r in records) == sorted(
        w * 100 + i for w in range(4) for i in range(20)
    )
    assert all(r.reply.content == big for r in records)


def _append_from_process(path: str, worker: int) -> None:
    trajectory = Trajectory(path)
    for i in range(25):
        trajectory.append(
            ToolCallRecord(role="p", tool="t", arguments={"w": worker, "i": i}, result="r" * 9000)
        )


def test_processes_append_whole_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_append_from_process, args=(str(path), w)) for w in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    seen = {(r.arguments["w"], r.arguments["i"]) for r in Trajectory(path).records()}
    assert seen == {(w, i) for w in range(3) for i in range(25)}
