"""Every tool call returns: hostile or broken arguments and files are tool errors, never a crash.

The property-based tests drive the real agent loop (scripted model, real file tools,
the session's trajectory observer) with generated tool calls over a tree that holds
the things an agent can leave behind: a FIFO, a sparse 400 MiB file, a non-UTF-8 name
and content, a symlink to /dev/zero, a directory where a file is expected.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ground.boundary import Boundary, Mount
from ground.trajectory import ToolCallRecord, Trajectory
from harness.models.scripted import ScriptedModel
from harness.run.candidate_repo import CandidateRepo
from harness.run.session import Session
from roles.agent import Agent, Submitted
from roles.tools import MAX_READ_CHARS, diff_tool, read_tool, submit_tool, write_tools

SECRET = "TOOLS-SECRET-51c2"


def lay_out_bench(root):
    """A candidate tree with every hostile shape, its hidden neighbour and one committed round."""
    source, app, hidden = root / "source", root / "app", root / "tests"
    for d in (source, app, hidden):
        d.mkdir()
    (source / "model.py").write_text("import torch\n")
    (hidden / "secret.txt").write_text(SECRET)
    (app / "dir").mkdir()
    (app / "ok.py").write_text("x = 1\n")
    (app / "latin.py").write_bytes(b"caf\xe9 = 1\n")
    os.mkfifo(app / "pipe")
    with open(app / "sparse.bin", "wb") as fh:
        fh.truncate(400 << 20)
    (app / "zero").symlink_to("/dev/zero")
    (app / "secret").symlink_to(hidden / "secret.txt")
    os.mkdir(os.fsencode(app) + b"/bad\xffname")
    boundary = Boundary(
        name="migrator:candidate",
        mounts=[Mount(host=source, inside="/source"), Mount(host=app, inside="/app", writable=True)],
        hidden=[hidden],
        workdir="/app",
        audit_log=root / "audit.log",
    )
    repo = CandidateRepo(root / "history", root / "history.git")
    repo.init()
    (repo.work_tree / "m.py").write_text("a = 1\n")
    repo.commit_round(1, "one")
    return SimpleNamespace(root=root, app=app, boundary=boundary, repo=repo)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The tree as laid out: tests that expect a particular refusal read it unchanged."""
    return lay_out_bench(tmp_path_factory.mktemp("tools"))


@pytest.fixture(scope="module")
def fuzz_bench(tmp_path_factory):
    """A tree of its own for generated calls, which overwrite and create files at will."""
    return lay_out_bench(tmp_path_factory.mktemp("tools-fuzz"))


def run_calls(bench, calls):
    """Run one agent over `calls` then `submit`; return (outcome, its tool records)."""
    tools = {t.name: t for t in [read_tool(bench.boundary), *write_tools(bench.boundary), diff_tool(bench.repo)]}

    def accept(summary):
        raise Submitted(summary)

    tools["submit"] = submit_tool("Finish.", {"summary": {"type": "string"}}, accept)
    bench.runs = getattr(bench, "runs", 0) + 1
    trajectory = Trajectory(bench.root / "trajectories" / f"{bench.runs}.jsonl")
    session = SimpleNamespace(trajectory=trajectory)
    finish = {"tool_calls": [{"name": "submit", "arguments": {"summary": "s"}}]}
    script = [{"tool_calls": [c]} for c in calls] + [finish]
    agent = Agent(
        ScriptedModel(script),
        tools,
        role="migrator",
        max_steps=len(script) + 1,
        on_tool=lambda *a: Session.record_tool(session, *a),
    )
    outcome = agent.run("system", "task")
    records = [r for r in trajectory.records() if isinstance(r, ToolCallRecord)]
    return outcome, records


HOSTILE_PATHS = [
    "/app/dir", "/app/pipe", "/app/sparse.bin", "/app/zero", "/app/secret", "/app/latin.py",
    "/app", "/app/ok.py/child", "/app/\0x", "/app/\ud800", "/app/" + "a" * 300, "/app/" + "a/" * 3000,
    "/app/bad\udcffname", "/app/bad\udcffname/f", "../../etc/passwd", "/proc/self/root/etc/shadow",
    "/dev/zero", "", ".", "/app/./../source/model.py", "/app/new/deeper/file.py",
]  # fmt: skip
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=40)
PATHS = st.one_of(
    st.sampled_from(HOSTILE_PATHS),
    ANY_TEXT,
    st.builds(lambda a, b: f"/app/{a}/{b}", ANY_TEXT, ANY_TEXT),
    st.binary(max_size=20).map(lambda b: "/app/" + os.fsdecode(b)),
    st.integers(),
    st.none(),
)
CONTENT = st.one_of(ANY_TEXT, st.just("\ud800"), st.just("x\0y"), st.integers(), st.none())
CALLS = st.one_of(
    st.builds(lambda p: {"name": "read_file", "arguments": {"path": p}}, PATHS),
    st.builds(lambda p, c: {"name": "write_file", "arguments": {"path": p, "content": c}}, PATHS, CONTENT),
    st.builds(
        lambda p, o, n: {"name": "edit_file", "arguments": {"path": p, "old": o, "new": n}}, PATHS, CONTENT, CONTENT
    ),
    st.builds(lambda p: {"name": "read_file", "arguments": {"path": p, "extra": 1}}, PATHS),
    st.builds(lambda p: {"name": "write_file", "arguments": p}, st.text(max_size=10)),
    st.builds(lambda r: {"name": "diff", "arguments": {"round": r}}, st.one_of(st.integers(), ANY_TEXT, st.none())),
)


def check_survives(bench, calls):
    outcome, records = run_calls(bench, calls)
    assert outcome.exit == "submitted", "the loop must survive every tool call"
    tool_messages = [m for m in outcome.messages if m["role"] == "tool"]
    assert len(tool_messages) == len(calls) + 1
    assert len(records) == len(calls) + 1, "every call, refused or not, is in the trajectory"
    for record, message in zip(records, tool_messages, strict=True):
        assert record.result.startswith("error:") == (not record.ok)
        assert SECRET not in message["content"]
        message["content"].encode("utf-8")  # what goes back to the model is valid text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(CALLS, min_size=1, max_size=4))
def test_generated_tool_calls_never_end_the_loop(fuzz_bench, calls):
    check_survives(fuzz_bench, calls)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(CALLS, min_size=1, max_size=4))
def test_thousands_of_generated_tool_calls_never_end_the_loop(fuzz_bench, calls):
    check_survives(fuzz_bench, calls)


@pytest.mark.parametrize(
    "call, reason",
    [
        ({"name": "write_file", "arguments": {"path": "/app/dir", "content": "x"}}, "is a directory"),
        ({"name": "write_file", "arguments": {"path": "/app/ok.py", "content": "a\ud800"}}, "lone surrogate"),
        ({"name": "write_file", "arguments": {"path": "/app/a\0b", "content": "x"}}, "NUL byte"),
        ({"name": "write_file", "arguments": {"path": "/app/" + "a" * 300, "content": "x"}}, "longer than 255"),
        ({"name": "write_file", "arguments": {"path": "/app/ok.py/child", "content": "x"}}, "cannot write"),
        ({"name": "write_file", "arguments": {"path": "/app/pipe", "content": "x"}}, "cannot write"),
        ({"name": "edit_file", "arguments": {"path": "/app/latin.py", "old": "caf", "new": "x"}}, "not UTF-8"),
        ({"name": "edit_file", "arguments": {"path": "/app/sparse.bin", "old": "a", "new": "b"}}, "edit limit"),
        ({"name": "read_file", "arguments": {"path": "/app/pipe"}}, "FIFO"),
        ({"name": "read_file", "arguments": {"path": "/app/zero"}}, "outside every mounted root"),
        ({"name": "read_file", "arguments": {"path": "/app/secret"}}, "outside every mounted root"),
        ({"name": "read_file", "arguments": {"path": 7}}, "must be a string"),
        ({"name": "diff", "arguments": {"round": 9}}, "has no snapshot"),
        ({"name": "diff", "arguments": {"round": "x"}}, "must be a round number"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_kind_of_bad_call_is_a_short_tool_error(bench, call, reason):
    outcome, records = run_calls(bench, [call])
    text = outcome.messages[3]["content"]
    assert text.startswith("error:") and reason in text, text
    assert len(text) < 700
    assert not records[0].ok


def test_a_non_utf8_directory_name_is_listed_readably(bench):
    outcome, _ = run_calls(bench, [{"name": "read_file", "arguments": {"path": "/app"}}])
    listing = outcome.messages[3]["content"]
    assert "bad\ufffdname/" in listing and "pipe" in listing


def test_reading_a_sparse_giant_is_bounded_before_it_allocates(bench):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome, _ = run_calls(bench, [{"name": "read_file", "arguments": {"path": "/app/sparse.bin"}}])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    text = outcome.messages[3]["content"]
    assert len(text) < MAX_READ_CHARS + 200 and "cut:" in text and str(400 << 20) in text
    assert grown_mib < 100, f"reading a 400 MiB sparse file grew the process by {grown_mib:.0f} MiB"


def test_diff_shows_the_latest_round(bench):
    outcome, _ = run_calls(bench, [{"name": "diff", "arguments": {}}])
    assert "+a = 1" in outcome.messages[3]["content"]


def test_the_diff_schema_lets_a_model_leave_out_the_round_as_its_description_says():
    from roles.tools import diff_tool

    schema = diff_tool(object()).schema()["function"]
    assert "Without `round`" in schema["description"] and schema["parameters"]["required"] == []


def test_writing_then_reading_works(bench):
    outcome, _ = run_calls(
        bench,
        [
            {"name": "write_file", "arguments": {"path": "/app/new/mod.py", "content": "y = 'ä'\n"}},
            {"name": "edit_file", "arguments": {"path": "/app/new/mod.py", "old": "ä", "new": "ö"}},
            {"name": "read_file", "arguments": {"path": "/app/new/mod.py"}},
        ],
    )
    tool_texts = [m["content"] for m in outcome.messages if m["role"] == "tool"]
    assert tool_texts[:3] == ["wrote 8 characters to /app/new/mod.py", "edited /app/new/mod.py", "y = 'ö'\n"]
    assert Path(bench.app / "new" / "mod.py").read_text() == "y = 'ö'\n"


@pytest.mark.parametrize("name", ["ok\n", "../../../etc/cron.d/x", "a/b", "", 7, "A"])
def test_probe_names_cannot_name_a_path(tmp_path, name):
    from roles.tools import ToolError
    from roles.verifier import probe_tools

    stored = []
    desk = SimpleNamespace(write_probe=lambda n, s: stored.append(n) or "kept", run_probe=lambda n: "ran")
    write = next(tool for tool in probe_tools(desk) if tool.name == "write_probe")
    with pytest.raises(ToolError):
        write(name=name, source="x")
    assert stored == []


def test_writing_a_probe_runs_it_and_removing_one_runs_nothing():
    from roles.verifier import probe_tools

    done = []
    desk = SimpleNamespace(
        write_probe=lambda n, s: done.append(("write", n)) or f"stored probe {n}",
        run_probe=lambda n: done.append(("run", n)) or "2 properties recorded",
    )
    tools = {tool.name: tool for tool in probe_tools(desk)}
    assert "run_probe" not in tools  # a written probe has run; the candidate cannot change during the turn
    assert tools["write_probe"](name="fwd", source="x = 1").text == "stored probe fwd\n2 properties recorded"
    assert done == [("write", "fwd"), ("run", "fwd")]
    done.clear()
    assert tools["write_probe"](name="fwd", source="  \n").text == "stored probe fwd"
    assert done == [("write", "fwd")]
