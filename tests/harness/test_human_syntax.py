"""The compact answer syntax of `--model human`, parsed by a pure function."""

from __future__ import annotations

import pytest

from harness.models.human_syntax import AnswerError, Call, Command, Text, heredoc_tags, is_complete, parse_answer


def tool(name, properties, required=None):
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": properties, "required": required or list(properties)},
        },
    }


DIAGNOSIS = {"$defs": {"Gap": {"type": "object"}}, "type": "object", "properties": {"gaps": {"type": "array"}}}
TOOLS = [
    tool("bash", {"command": {"type": "string"}}),
    tool("read_file", {"path": {"type": "string"}}),
    tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}),
    tool("edit_file", {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}),
    tool("run_checks", {}),
    tool("tail", {"path": {"type": "string"}, "lines": {"type": "integer"}, "follow": {"type": "boolean"}}, ["path"]),
    tool("scale", {"factor": {"type": "number"}}),
]
SUBMIT_SUMMARY = tool("submit", {"summary": {"type": "string"}})
SUBMIT_DIAGNOSIS = tool("submit", {"diagnosis": DIAGNOSIS})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bash: ls /app", Call("bash", {"command": "ls /app"})),
        ("bash:ls -la", Call("bash", {"command": "ls -la"})),
        ("  bash:   cd /app && python -c 'print(1)'  ", Call("bash", {"command": "cd /app && python -c 'print(1)'"})),
        ("read_file /source/calc/ops.py", Call("read_file", {"path": "/source/calc/ops.py"})),
        ("read_file: /source/a b.py", Call("read_file", {"path": "/source/a b.py"})),
        ('read_file "/source/a b.py"', Call("read_file", {"path": "/source/a b.py"})),
        ("run_checks", Call("run_checks", {})),
        ('edit_file /app/ops.py "k + 1" k', Call("edit_file", {"path": "/app/ops.py", "old": "k + 1", "new": "k"})),
        ("edit_file new=k path=/app/o.py old=x", Call("edit_file", {"path": "/app/o.py", "old": "x", "new": "k"})),
        (
            'write_file: {"path": "/app/a.py", "content": "x = 1"}',
            Call("write_file", {"path": "/app/a.py", "content": "x = 1"}),
        ),
        (
            "write_file /app/x.py <<EOF\nimport numpy\n\nx = 1\nEOF",
            Call("write_file", {"path": "/app/x.py", "content": "import numpy\n\nx = 1\n"}),
        ),
        ("write_file /app/x.py <<'PY'\nEOF\nPY", Call("write_file", {"path": "/app/x.py", "content": "EOF\n"})),
        ("write_file /app/e.py <<EOF\nEOF", Call("write_file", {"path": "/app/e.py", "content": ""})),
        (
            "edit_file /app/o.py <<OLD <<NEW\nk + 1\nOLD\nk\nNEW",
            Call("edit_file", {"path": "/app/o.py", "old": "k + 1\n", "new": "k\n"}),
        ),
        (
            "write_file content=<<EOF path=/app/k.py\nbody\nEOF",
            Call("write_file", {"path": "/app/k.py", "content": "body\n"}),
        ),
        ("tail /app/log 20 true", Call("tail", {"path": "/app/log", "lines": 20, "follow": True})),
        ("tail /app/log follow=no", Call("tail", {"path": "/app/log", "follow": False})),
        ("scale: 2.5", Call("scale", {"factor": 2.5})),
        (":prompt", Command("prompt")),
        ("  :quit  ", Command("quit")),
        (":evidence", Command("evidence")),
        ("> bash: is not called", Text("bash: is not called")),
        ("I will read the source first.", Text("I will read the source first.")),
    ],
)
def test_answers_parse(text, expected):
    assert parse_answer(text, TOOLS) == expected


def test_submit_text_goes_to_its_only_parameter_and_json_to_an_object_parameter():
    assert parse_answer("submit: wrote calc", [SUBMIT_SUMMARY]) == Call("submit", {"summary": "wrote calc"})
    assert parse_answer('submit: {"gaps": []}', [SUBMIT_DIAGNOSIS]) == Call("submit", {"diagnosis": {"gaps": []}})
    whole = 'submit: {"diagnosis": {"gaps": [], "summary": "s"}}'
    assert parse_answer(whole, [SUBMIT_DIAGNOSIS]) == Call("submit", {"diagnosis": {"gaps": [], "summary": "s"}})
    heredoc = 'submit <<JSON\n{"summary": "s",\n "gaps": []}\nJSON'
    assert parse_answer(heredoc, [SUBMIT_DIAGNOSIS]) == Call("submit", {"diagnosis": {"summary": "s", "gaps": []}})


@pytest.mark.parametrize(
    ("text", "tools", "fragment"),
    [
        ("", TOOLS, "nothing typed"),
        ("   \n ", TOOLS, "nothing typed"),
        (":exit", TOOLS, "unknown command :exit"),
        (":", TOOLS, "unknown command"),
        ("bsh: ls", TOOLS, "no tool named 'bsh'"),
        ("bash: ls", [SUBMIT_SUMMARY], "no tool named 'bash'"),
        ("write_file /app/x.py", TOOLS, "missing content"),
        ("read_file /a /b", TOOLS, "too many arguments"),
        ("read_file /a mode=r", TOOLS, "too many arguments"),
        ("edit_file /a x y path=/b", TOOLS, "path given twice"),
        ('read_file "/a', TOOLS, "No closing quotation"),
        ("write_file /app/x.py <<EOF\nbody", TOOLS, "<<EOF is not closed"),
        ("write_file /app/x.py <<EOF\nbody\nEOF\nmore", TOOLS, "one tool call per answer"),
        ("tail /a many", TOOLS, "lines must be integer"),
        ("tail /a follow=maybe", TOOLS, "follow must be boolean"),
        ("scale: fast", TOOLS, "factor must be number"),
        ("run_checks: now", TOOLS, "takes no arguments"),
        ("submit: {not json", [SUBMIT_DIAGNOSIS], "not a JSON object"),
        ("submit: plain words", [SUBMIT_DIAGNOSIS], "diagnosis must be a JSON object"),
    ],
)
def test_bad_answers_are_refused_with_a_reason(text, tools, fragment):
    with pytest.raises(AnswerError) as info:
        parse_answer(text, tools)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "complete"),
    [
        ("bash: ls", True),
        ("write_file /a <<EOF", False),
        ("write_file /a <<EOF\nx\n", False),
        ("write_file /a <<EOF\nx\nEOF", True),
        ("edit_file /a <<OLD <<NEW\nx\nOLD\ny", False),
        ("edit_file /a <<OLD <<NEW\nx\nOLD\ny\nNEW", True),
        ("edit_file /a <<OLD <<NEW\nNEW\nOLD\ny", False),  # tags close in order
        ("> <<EOF is just text", False),
    ],
)
def test_completeness_follows_the_heredocs_of_the_first_line(text, complete):
    assert is_complete(text) is complete


def test_heredoc_tags_accept_quoted_and_named_tags():
    assert heredoc_tags("write_file /a <<'EOF' x=<<\"B\" <<-C") == ["EOF", "B", "C"]
    assert heredoc_tags("bash: echo 'unclosed") == []
