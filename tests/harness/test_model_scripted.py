from __future__ import annotations

import json

import pytest

from ground.errors import TwinError
from ground.model import ModelReply
from harness.models.scripted import ScriptedModel, ScriptExhausted

YAML_SCRIPT = """
- "I will read the source."
- content: Reading.
  tool_calls:
    - {name: read_file, arguments: {path: /source/model.py}}
    - {id: mine, name: bash, arguments: '{"cmd": '}
  usage: {prompt_tokens: 120, completion_tokens: 12}
"""


def test_yaml_script_in_order(tmp_path):
    path = tmp_path / "script.yaml"
    path.write_text(YAML_SCRIPT)
    model = ScriptedModel.from_file(path)
    assert model.label == "scripted"
    first = model.query([{"role": "user", "content": "go"}], role="migrator")
    assert first.content == "I will read the source." and first.tool_calls == []
    second = model.query([], role="migrator")
    read, bash = second.tool_calls
    assert (read.id, read.name, read.arguments) == (
        "call_1_0",
        "read_file",
        {"path": "/source/model.py"},
    )
    assert (bash.id, bash.arguments, bash.arguments_raw) == ("mine", {}, '{"cmd": ')
    assert second.usage.prompt_tokens == 120
    assert [role for role, _, _ in model.requests] == ["migrator", "migrator"]
    with pytest.raises(ScriptExhausted, match="asked for reply 3 but the script has 2"):
        model.query([])


def test_json_script_and_reply_objects(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(["a", {"content": "b"}]))
    assert [ScriptedModel.from_file(path).query([]).content for _ in range(1)] == ["a"]
    model = ScriptedModel([ModelReply(content="direct"), "text"])
    assert model.query([]).content == "direct"
    assert model.query([]).content == "text"


def test_replies_are_copies(tmp_path):
    model = ScriptedModel(["x", "x"])
    model.query([]).content = "mutated"
    assert model.query([]).content == "x"


@pytest.mark.parametrize(
    "body, match",
    [
        ("{a: [", "not valid JSON/YAML"),
        ("content: x", "must hold a list"),
        ("- 3", "expected a string or an object"),
        ("- {contents: x}", "unknown field"),
        ("- {tool_calls: [{arguments: {}}]}", "malformed"),
        ("- {content: x, usage: {prompt_tokens: 5, completion_tokens: -900}}", "malformed"),
        ("- {content: x, cost_usd: -1.5}", "malformed"),
    ],
)
def test_bad_scripts_are_one_clear_error(tmp_path, body, match):
    path = tmp_path / "script.yaml"
    path.write_text(body)
    with pytest.raises(TwinError, match=match):
        ScriptedModel.from_file(path)


def test_missing_script(tmp_path):
    with pytest.raises(TwinError, match="cannot read"):
        ScriptedModel.from_file(tmp_path / "absent.yaml")
