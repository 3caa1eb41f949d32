"""Every way hostile JSON fails is one error, and a model's tool call keeps such arguments verbatim."""

from __future__ import annotations

import pytest

from ground.model import ToolCall
from ground.untrusted_json import MAX_DEPTH, UntrustedJSONError, loads_untrusted

HOSTILE = {
    "syntax": "{nope",
    "not-utf8": b"\xff\xfe{}",
    "recursion": "[" * 100_000 + "]" * 100_000,
    "int-digits": '{"n": 1' + "0" * 5000 + "}",
    "too-deep": "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_json_fails_as_one_error(text):
    with pytest.raises(UntrustedJSONError):
        loads_untrusted(text)


def test_json_within_the_limits_is_read():
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_untrusted(nested) is not None
    assert loads_untrusted(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}


@pytest.mark.parametrize("text", [HOSTILE["recursion"], HOSTILE["int-digits"]], ids=["recursion", "int-digits"])
def test_a_tool_call_keeps_unreadable_arguments_verbatim(text):
    call = ToolCall.from_raw("c1", "bash", text)
    assert call.arguments == {} and call.arguments_raw == text
