"""The live client through litellm's real HTTP path, against a fake server on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ground.errors import BudgetExceeded
from ground.model import ModelInfraError, ModelRequestError
from ground.trajectory import ModelCallRecord, ModelErrorRecord, Trajectory
from harness.models.budget import Budget, BudgetTracker
from harness.models.config import ModelConfig
from harness.models.factory import make_model
from harness.models.litellm_client import LiteLLMModel, _classify, _import_litellm, usage_of
from tests.fakes import FakeOpenAIServer, error, text, tool_call, tool_calls

REPO = Path(__file__).resolve().parents[2]
HI = [{"role": "user", "content": "hi"}]
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def local(server, name="openai/fake-local", *, trajectory=None, budget=None, **settings):
    settings.setdefault("backoff_s", 0.01)
    config = ModelConfig(name=name, api_base=server.base_url, **settings)
    return make_model(config, api_key="sk-test-dummy", trajectory=trajectory, budget=budget)


def test_plain_answer_and_what_litellm_sent(server):
    server.push(text("hello there", prompt_tokens=11, completion_tokens=3))
    reply = local(server).query(HI)
    assert reply.content == "hello there"
    assert reply.tool_calls == []
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 3)
    assert reply.latency_s > 0
    (request,) = server.requests
    assert request.body["model"] == "fake-local"
    assert request.body["messages"] == HI
    assert "tools" not in request.body
    assert request.headers["authorization"] == "Bearer sk-test-dummy"


def test_tool_call_is_parsed_and_tools_are_sent(server):
    server.push(tool_call("read_file", {"path": "/source/model.py"}, id="call_abc"))
    reply = local(server).query(HI, [READ_TOOL])
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_abc",
        "read_file",
        {"path": "/source/model.py"},
    )
    assert call.arguments_raw is None
    assert server.requests[0].body["tools"][0]["function"]["name"] == "read_file"
    message = reply.as_message()
    assert message["tool_calls"][0]["function"]["arguments"] == '{"path": "/source/model.py"}'


def test_invalid_tool_arguments_are_kept_raw(server):
    server.push(tool_calls([("read_file", '{"path": ', "c1"), ("read_file", "[1, 2]", "c2")]))
    first, second = local(server).query(HI, [READ_TOOL]).tool_calls
    assert first.arguments == {} and first.arguments_raw == '{"path": '
    assert second.arguments == {} and second.arguments_raw == "[1, 2]"


def test_rate_limit_then_success_is_retried(server):
    server.push(error(429, "slow down"), error(503, "overloaded"), text("finally"))
    assert local(server).query(HI).content == "finally"
    assert len(server.requests) == 3


def test_retry_after_header_is_honoured(server):
    server.push(error(429, "slow down", headers={"Retry-After": "0.6"}), text("ok"))
    started = time.monotonic()
    assert local(server).query(HI).content == "ok"
    assert time.monotonic() - started >= 0.6


def test_server_errors_exhaust_retries_as_infra_failure(server, tmp_path):
    server.push(*[error(500, "boom")] * 3)
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    model = local(server, retries=2, trajectory=trajectory)
    with pytest.raises(ModelInfraError, match="after 3 attempt"):
        model.query(HI)
    assert len(server.requests) == 3
    (record,) = trajectory.records()
    assert isinstance(record, ModelErrorRecord) and record.kind == "infra"


@pytest.mark.parametrize(
    "status, message",
    [
        (401, "invalid api key"),
        (403, "forbidden"),
        (404, "The model `fake-local` does not exist"),
        (400, "This model's maximum context length is 8192 tokens, you requested 9000"),
    ],
)
def test_refusals_are_not_retried(server, tmp_path, capfd, status, message):
    server.push(error(status, message), text("must not be reached"))
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    with pytest.raises(ModelRequestError, match="refused"):
        local(server, trajectory=trajectory).query(HI)
    assert len(server.requests) == 1
    printed = capfd.readouterr()
    assert printed.out == "" and "Give Feedback" not in printed.err  # litellm kept quiet
    (record,) = trajectory.records()
    assert isinstance(record, ModelErrorRecord) and record.kind == "request"


def test_timeout_is_retried_then_reported_as_infra(server):
    _import_litellm()  # seconds on a busy machine; not part of what is timed
    server.push(text("late", delay_s=30), text("late again", delay_s=30))
    started = time.monotonic()
    with pytest.raises(ModelInfraError, match="after 2 attempt"):
        local(server, timeout_s=0.4, retries=1).query(HI)
    assert time.monotonic() - started < 20  # gave up long before the server answered
    assert len(server.requests) == 2


def test_timeout_then_success(server):
    server.push(text("late", delay_s=30), text("in time"))
    assert local(server, timeout_s=0.4, retries=1).query(HI).content == "in time"


def test_refused_connection_is_infra():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens
    config = ModelConfig(
        name="openai/fake-local", api_base=f"http://127.0.0.1:{port}/v1", retries=1, backoff_s=0.01, timeout_s=5
    )
    model = make_model(config, api_key="sk-test-dummy")
    with pytest.raises(ModelInfraError):
        model.query(HI)


def test_missing_credentials_are_a_request_error_not_infra():
    litellm = _import_litellm()
    exc = litellm.InternalServerError(
        message="OpenAIException - Missing credentials. Please pass an `api_key`",
        llm_provider="openai",
        model="gpt-4o",
    )
    assert _classify(litellm, exc) == "refused"
    assert _classify(litellm, litellm.RateLimitError("x", "openai", "gpt-4o")) == "retry"
    assert _classify(litellm, ValueError("a bug")) is None


def test_local_server_without_any_key_gets_a_placeholder(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TWIN_API_KEY", raising=False)
    server.push(text("no key needed"))
    model = make_model(ModelConfig(name="openai/fake-local", api_base=server.base_url))
    assert model.query(HI).content == "no key needed"
    assert server.requests[0].headers["authorization"] == "Bearer no-key"


def test_cost_and_tokens_recorded_for_a_priced_model(server, tmp_path):
    litellm = _import_litellm()
    price = litellm.model_cost["gpt-4o-mini"]
    server.push(text("priced", prompt_tokens=1000, completion_tokens=200))
    trajectory = Trajectory(tmp_path / "trajectory.jsonl")
    budget = BudgetTracker(Budget())
    reply = local(server, "openai/gpt-4o-mini", trajectory=trajectory, budget=budget).query(HI)
    expected = 1000 * price["input_cost_per_token"] + 200 * price["output_cost_per_token"]
    assert reply.cost_usd == pytest.approx(expected)
    assert reply.cost_usd > 0
    (record,) = trajectory.records()
    assert isinstance(record, ModelCallRecord)
    assert record.reply.cost_usd == pytest.approx(expected)
    assert record.reply.usage.prompt_tokens == 1000
    assert record.request.messages == HI
    assert record.model == "openai/gpt-4o-mini"
    assert "sk-test-dummy" not in trajectory.path.read_text()
    spent = budget.spent
    assert (spent.tokens_in, spent.tokens_out, spent.calls) == (1000, 200, 1)
    assert spent.usd == pytest.approx(expected)


def test_unpriced_local_model_costs_zero(server):
    server.push(text("free", prompt_tokens=500, completion_tokens=50))
    reply = local(server, "openai/my-own-finetune-v3").query(HI)
    assert reply.cost_usd == 0.0
    assert reply.usage.prompt_tokens == 500


def test_budget_stops_before_the_call_that_would_exceed(server, tmp_path):
    server.push(text("one"), text("two"), text("three"))
    budget = BudgetTracker(Budget(max_calls=2))
    model = local(server, budget=budget, trajectory=Trajectory(tmp_path / "t.jsonl"))
    model.query(HI)
    model.query(HI)
    with pytest.raises(BudgetExceeded) as info:
        model.query(HI)
    assert info.value.kind == "calls" and info.value.used == 2
    assert len(server.requests) == 2


def test_token_budget_stops_run(server):
    server.push(text("big", prompt_tokens=900, completion_tokens=200), text("never"))
    model = local(server, budget=BudgetTracker(Budget(max_tokens=1000)))
    model.query(HI)
    with pytest.raises(BudgetExceeded, match="tokens"):
        model.query(HI)
    assert len(server.requests) == 1


def test_response_cache_hits_skip_the_server(server, tmp_path):
    server.push(text("cached answer", prompt_tokens=40), text("second live answer"))
    model = local(server, "openai/gpt-4o-mini", cache_dir=tmp_path / "cache")
    first = model.query(HI)
    again = model.query(HI)
    assert len(server.requests) == 1
    assert again.content == "cached answer" and again.cached and not first.cached
    assert again.cost_usd == 0.0 and again.usage.prompt_tokens == 40
    other = local(server, "openai/gpt-4o-mini", cache_dir=tmp_path / "cache", temperature=0.7)
    assert other.query(HI).content == "second live answer"
    assert len(server.requests) == 2


@pytest.mark.heavy  # imports litellm in a fresh interpreter
def test_litellm_is_imported_lazily_and_offline():
    probe = (
        "import sys, os, harness.cli.app, harness.models.factory, harness.models.litellm_client;"
        "assert 'litellm' not in sys.modules and 'openai' not in sys.modules;"
        "harness.models.litellm_client._import_litellm();"
        "assert os.environ['LITELLM_LOCAL_MODEL_COST_MAP'] == 'True'"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_repr_never_shows_the_key():
    model = LiteLLMModel(ModelConfig(name="openai/x"), api_key="sk-very-secret", api_base="http://127.0.0.1:1/v1")
    assert "sk-very-secret" not in repr(model)


def test_missing_tool_call_ids_get_unique_ones(server):
    server.push(tool_calls([("read_file", {"path": "a"}, ""), ("read_file", {"path": "b"}, "")]))
    first, second = local(server).query(HI, [READ_TOOL]).tool_calls
    assert first.id.startswith("call_") and second.id.startswith("call_")
    assert first.id != second.id


def test_a_provider_s_negative_count_is_read_as_not_reported():
    usage = usage_of({"prompt_tokens": -50, "completion_tokens": 4, "cache_read_input_tokens": -2})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (0, 4, 0)
