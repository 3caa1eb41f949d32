from __future__ import annotations

import pytest

from ground.model import ModelReply, Usage
from harness.models.cache import ResponseCache

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "bash"}}]
BASE = dict(model="openai/x", api_base=None, messages=MESSAGES, tools=TOOLS, settings={"t": 0})


@pytest.mark.parametrize(
    "change",
    [
        {"model": "openai/y"},
        {"api_base": "http://127.0.0.1:9/v1"},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"tools": None},
        {"settings": {"t": 0.5}},
    ],
)
def test_key_depends_on_each_part(change):
    assert ResponseCache.key(**BASE) != ResponseCache.key(**{**BASE, **change})


def test_key_ignores_dict_order():
    reordered = {**BASE, "messages": [{"content": "hi", "role": "user"}]}
    assert ResponseCache.key(**BASE) == ResponseCache.key(**reordered)


def test_put_then_get_marks_cached_and_free(tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    key = ResponseCache.key(**BASE)
    assert cache.get(key) is None
    reply = ModelReply(content="x", usage=Usage(prompt_tokens=9), cost_usd=0.3, latency_s=2.0)
    cache.put(key, reply, model="openai/x")
    hit = cache.get(key)
    assert hit is not None
    assert (hit.content, hit.usage.prompt_tokens) == ("x", 9)
    assert (hit.cached, hit.cost_usd, hit.latency_s) == (True, 0.0, 0.0)
    assert not list((tmp_path / "cache").rglob(".tmp-*"))


def test_corrupt_entry_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path)
    key = ResponseCache.key(**BASE)
    cache.put(key, ModelReply(content="x"))
    next(tmp_path.rglob(f"{key}.json")).write_text("{not json")
    assert cache.get(key) is None
