"""A round's budget plan: the policy, the split of what is left, the text a prompt shows, the share's watch."""

from __future__ import annotations

import pytest

from evidence_store.numbers import canonical
from harness.models.budget import Budget, Spent
from harness.models.budget_plan import Amounts, BudgetShares, RoundPlan, ShareWatch, budget_text
from harness.run.directory import RunConfig, RunError
from roles.agent import Agent, Submitted
from roles.tools import Tool, ToolResult, submit_tool


def test_the_default_policy_gives_the_verifier_what_the_others_and_the_reserve_leave():
    policy = BudgetShares()
    assert (policy.diagnoser, policy.migrator, policy.reserve) == (0.15, 0.55, 0.05)
    assert policy.verifier == pytest.approx(0.25)


def test_a_policy_that_leaves_the_verifier_nothing_is_one_clear_error(tmp_path):
    with pytest.raises(RunError, match="bad run setting budget_shares: .*the Verifier gets the rest"):
        RunConfig.build(task=tmp_path, model="scripted:x", budget_shares={"diagnoser": 0.5, "migrator": 0.5})


def test_the_policy_is_read_from_run_budget_shares_in_toml(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[run]\ntask = "t"\nmodel = "scripted:x"\n[run.budget_shares]\nmigrator = 0.6\nreserve = 0.1\n')
    config = RunConfig.from_toml(toml)
    assert config.budget_shares.migrator == 0.6 and config.budget_shares.verifier == pytest.approx(0.15)
    assert config.model_dump(mode="json")["budget_shares"]["migrator"] == 0.6  # written whole into config.json


def test_a_round_splits_what_is_left_of_each_limited_kind():
    budget = Budget(max_tokens=10_000, max_wall_s=100.0)
    plan = RoundPlan.make(budget, Spent(tokens_in=3000, tokens_out=1000, wall_s=20.0), BudgetShares())
    assert plan.left.kinds() == {"tokens": 6000, "wall_s": 80.0}
    assert plan.shares["migrator"].kinds() == pytest.approx({"tokens": 3300, "wall_s": 44.0})
    assert plan.shares["diagnoser"].tokens == pytest.approx(900)
    assert plan.shares["verifier"].usd is None  # no dollar limit: nothing to share
    unlimited = RoundPlan.make(Budget(), Spent(), BudgetShares())
    assert unlimited.shares["migrator"].kinds() == {}


def test_a_prompt_shows_what_is_left_and_the_roles_share_and_replays_on_another_machine():
    budget = Budget(max_tokens=10_000, max_usd=2.0, max_wall_s=100.0)
    share = Amounts(tokens=5500, usd=1.1, wall_s=55.0)
    text = budget_text(budget, Spent(usd=0.25, wall_s=12.5), steps=80, share=share, fraction=0.55)
    assert "The run has left: 10,000 tokens, $1.75, 87.5 s of wall time." in text
    assert "Your share of this round (55% of what was left when it started): 5,500 tokens, $1.10, 55.0 s" in text
    assert "at most 80 model calls" in text
    other = budget_text(budget, Spent(usd=0.0, wall_s=13.1), steps=80, share=share, fraction=0.55)
    assert canonical(other) == canonical(text)  # dollars and seconds are masked; tokens replay exactly
    assert "no token, dollar, model-call or wall-time limit" in budget_text(Budget(), Spent(), steps=150)


class Spending:
    def __init__(self) -> None:
        self.now = Spent()

    def __call__(self) -> Spent:
        return self.now


@pytest.mark.parametrize(("tokens", "status"), [(0, "within"), (999, "within"), (1000, "reached"), (1100, "over")])
def test_a_share_is_within_reached_or_over_by_its_margin(tokens, status):
    spending = Spending()
    watch = ShareWatch("migrator", Amounts(tokens=1000), 0.10, spending, Spent(tokens_in=500))
    spending.now = Spent(tokens_in=500 + tokens)
    assert watch.status() == status


class Replies:
    """Answers every call with one `echo` (never `submit`), counting its calls and the notices it read."""

    name = label = "scripted"

    def __init__(self, spending: Spending, per_call: int) -> None:
        self.spending, self.per_call, self.calls, self.read = spending, per_call, 0, []

    def query(self, messages, tools=None, *, role="agent"):
        from ground.model import ModelReply, ToolCall

        self.calls += 1
        self.read.append(sum("used your share" in str(m.get("content")) for m in messages))
        self.spending.now = Spent(tokens_in=self.spending.now.tokens_in + self.per_call)
        return ModelReply(tool_calls=[ToolCall(id=f"c{self.calls}", name="echo", arguments={})])


def agent_with(model) -> Agent:
    echo = Tool("echo", "Echo.", {}, lambda: ToolResult(text="echoed"))

    def accept(summary: str) -> None:
        raise Submitted(summary)

    return Agent(model, {"echo": echo, "submit": submit_tool("Finish.", {"summary": {}}, accept)}, role="migrator")


def test_a_role_at_its_share_is_told_once_and_submitted_for_after_one_more_reply():
    spending = Spending()
    model = Replies(spending, per_call=100)
    watch = ShareWatch("migrator", Amounts(tokens=1000), 0.5, spending, Spent())
    outcome = agent_with(model).run("system", "task", share=watch)
    assert outcome.exit == "share_spent" and outcome.output is None
    assert model.calls == 11  # 10 calls reach 1,000 tokens; told; the 11th reply did not submit
    assert model.read == [0] * 10 + [1]  # the notice appears once, in the last request
    assert sum("used your share" in str(m.get("content")) for m in outcome.messages) == 1


def test_a_role_past_its_share_and_margin_is_submitted_for_at_once():
    spending = Spending()
    model = Replies(spending, per_call=5000)  # one call takes it far past share and margin
    watch = ShareWatch("migrator", Amounts(tokens=1000), 0.10, spending, Spent())
    outcome = agent_with(model).run("system", "task", share=watch)
    assert outcome.exit == "share_spent" and model.calls == 1 and model.read == [0]


def test_without_a_share_nothing_is_watched():
    spending = Spending()
    model = Replies(spending, per_call=5000)
    outcome = Agent(model, agent_with(model).tools, role="migrator", max_steps=3).run("system", "task")
    assert outcome.exit == "step_limit" and model.calls == 3
