from __future__ import annotations

import pytest

from ground.errors import BudgetExceeded, TwinError
from ground.model import ModelReply, ModelRequestError, Usage
from ground.trajectory import ModelCallRecord, ModelErrorRecord, Trajectory
from harness.models.budget import Budget, BudgetTracker
from harness.models.config import ModelConfig, parse_model_name
from harness.models.factory import MeteredModel, make_model
from harness.models.litellm_client import LiteLLMModel
from harness.models.scripted import ScriptedModel
from harness.run.directory import RunConfig, RunError


def test_scripted_model_records_and_charges(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(
        "- {content: one, usage: {prompt_tokens: 5, completion_tokens: 1}, cost_usd: 0.5}\n- two\n"
    )
    trajectory = Trajectory(tmp_path / "t.jsonl")
    trajectory.set_context(round=3, step=1)
    budget = BudgetTracker(Budget(max_usd=0.5))
    model = make_model(ModelConfig(name=f"scripted:{script}"), trajectory=trajectory, budget=budget)
    assert isinstance(model, MeteredModel) and isinstance(model.inner, ScriptedModel)
    assert model.label == "scripted"
    assert model.query([{"role": "user", "content": "q"}], role="diagnoser").content == "one"
    with pytest.raises(BudgetExceeded, match="dollars"):
        model.query([])
    (record,) = trajectory.records()
    assert isinstance(record, ModelCallRecord)
    assert (record.index, record.role, record.round, record.step) == (0, "diagnoser", 3, 1)
    assert record.label == "scripted"
    assert budget.spent.tokens_in == 5


def test_live_names_make_a_litellm_model_without_importing_it(monkeypatch, tmp_path):
    monkeypatch.setenv("TWIN_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TWIN_API_KEY", "sk-env")
    model = make_model(ModelConfig(name="anthropic/claude-x", cache_dir=tmp_path, temperature=0.2, max_tokens=99))
    inner = model.inner
    assert isinstance(inner, LiteLLMModel)
    assert (inner.name, inner.api_base, inner.temperature, inner.max_tokens) == (
        "anthropic/claude-x",
        "http://127.0.0.1:9/v1",
        0.2,
        99,
    )
    assert inner.cache is not None and inner.cache.directory == tmp_path
    assert model.label == "anthropic/claude-x"
    explicit = make_model(ModelConfig(name="openai/x", api_base="http://h/v1"), api_key="sk-arg").inner
    assert explicit.api_base == "http://h/v1" and explicit._api_key == "sk-arg"


@pytest.mark.parametrize("name", ["scripted:", "replay:  "])
def test_names_without_their_path_are_clear_errors(name):
    with pytest.raises(TwinError, match="needs a path"):
        make_model(ModelConfig(name=name))


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        ({"name": ""}, "model.name: Value error, no model given"),
        ({"name": "   "}, "model.name: Value error, no model given"),
        ({"name": "openai/x", "retries": -1}, "model.retries"),
        ({"name": "openai/x", "timeout_s": 0}, "model.timeout_s"),
    ],
)
def test_bad_model_settings_are_one_clear_error(tmp_path, settings, where):
    with pytest.raises(RunError, match=f"^bad run setting {where}"):
        RunConfig.build(task=tmp_path, model=settings)


class Refusing:
    name = "refusing"

    def query(self, messages, tools=None, *, role="agent"):
        raise ModelRequestError("refused: context window")


class Free:
    name = "free"

    def query(self, messages, tools=None, *, role="agent"):
        return ModelReply(content="ok", usage=Usage(prompt_tokens=2))


def test_metered_model_records_failures_and_does_not_charge_them(tmp_path):
    trajectory = Trajectory(tmp_path / "t.jsonl")
    budget = BudgetTracker(Budget())
    model = MeteredModel(Refusing(), trajectory=trajectory, budget=budget)
    with pytest.raises(ModelRequestError):
        model.query([], role="verifier")
    (record,) = trajectory.records()
    assert isinstance(record, ModelErrorRecord)
    assert (record.kind, record.role, record.error) == (
        "request",
        "verifier",
        "refused: context window",
    )
    assert budget.spent.calls == 0


def test_metered_model_works_without_trajectory_or_budget():
    model = MeteredModel(Free())
    assert model.label == "free"
    assert model.query([]).content == "ok"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("replay:runs/x", "replay"),
        ("scripted:s.json", "scripted"),
        ("inbox:box/", "inbox"),
        ("human", "human"),
        ("openai/gpt-4o", "litellm"),
        ("ollama_chat/qwen2.5-coder:7b", "litellm"),  # a colon in a provider's model name
        ("humanoid/x", "litellm"),
        ("litellm:x", "litellm"),
    ],
)
def test_model_kind_selects_the_registry_entry(name, kind):
    from harness.models.factory import MODEL_KINDS

    assert parse_model_name(name).key == kind and kind in MODEL_KINDS
    assert ModelConfig(name=name).kind == parse_model_name(name)
