"""The base scaffold: one agent and the instruction; a new round only when there is something new to say.

Same agent loop, model, tools and sandboxes as the twin loop, but no roles, no probes and
no evidence: the baseline of 002 §5. Every round's candidate is committed and tagged like
the twin loop's, so both are graded the same way.

A single agent is bounded by the run's budget, not by rounds. It stops once it submits,
unless something new can be shown to it: a round after a submit happens only when twin's
built-in candidate-side checks (the same for every scaffold, never the grader) find a
property of the candidate violated, and the next round's message lists them; a round after
the agent used its steps without submitting says so. Never a bare "continue": an agent that
submitted and has nothing failing is done.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ground.errors import BudgetExceeded
from harness.models.budget_plan import budget_text
from harness.run.final_choice import settle
from harness.run.progress import Progress
from harness.run.session import Session
from roles import prompting
from roles.agent import Agent
from roles.migrator import summary_submit_tool
from roles.tools import workbench_tools


@dataclass(frozen=True)
class Reprompt:
    """What is new for a single agent's next round: why it gets one."""

    step_limit: int = 0
    """The previous round used all these model calls without submitting (0: it submitted)."""
    failing: list[str] = field(default_factory=list)
    """Violated candidate-side checks after the agent submitted: `id (kind): description — observation`."""


class BaseScaffold:
    """Runs up to R rounds of a single agent, a new one only with something new to say (module docstring).

    Another single-agent scaffold reuses the rounds by overriding `work()`.
    """

    role = "agent"
    name = "base scaffold"

    def __init__(self, session: Session, progress: Progress) -> None:
        self.s = session
        self.progress = progress
        tools = workbench_tools(session.workbench(self.role, write=True), write=True)
        tools["submit"] = summary_submit_tool("Finish with a short summary of what you did.")
        self.agent = Agent(
            session.model,
            tools,
            role=self.role,
            max_steps=session.config.base_steps,
            on_tool=session.record_tool,
            on_step=session.step_observer(progress),
            context=session.context_policy,  # the twin roles' policy: the comparison stays fair
            budget_check=session.budget.check_tool,
        )

    def run(self) -> None:
        state = self.s.state
        rounds = self.s.config.rounds
        state.stop_reason = f"all {rounds} rounds done"
        try:
            for t in range(1, rounds + 1):
                if any(r.round == t and "migrate" in r.done for r in state.rounds):
                    continue
                reprompt = self.reprompt(t - 1) if t > 1 else Reprompt()
                if reprompt is None:
                    state.stop_reason = (
                        f"round {t - 1}: the agent submitted and twin's candidate-side checks found nothing violated"
                    )
                    break
                rs = state.round_state(t)
                self.s.repo.reset_to(t - 1)
                self.s.trajectory.set_context(round=t, step=0)
                self.progress.role(t, self.role)
                rs.note, rs.agent_submitted = self.work(t, reprompt)
                rs.commit = self.s.repo.commit_round(t, "agent")
                rs.done.append("migrate")
                self.s.save(round=t)
                self.s.snapshot_round(t)
        except BudgetExceeded as exc:
            state.stop_reason = f"budget: {exc}"
            for rs in state.rounds:
                if "migrate" not in rs.done:
                    rs.commit = self.s.repo.commit_round(rs.round, "agent (stopped by budget)")
                    rs.note = "stopped by budget"
                    self.s.snapshot_round(rs.round)
        settle(state, rounds, self.s.config.final_rule, evidence=False)
        state.status = "finished"
        self.s.save()

    def reprompt(self, previous: int) -> Reprompt | None:
        """What round `previous + 1` can tell the agent that is new, or None: it submitted and nothing fails."""
        rs = self.s.state.round_state(previous)
        if not rs.agent_submitted:
            return Reprompt(step_limit=self.s.config.base_steps)
        failing = self.failing_checks(previous)
        if not failing:
            return None
        self.progress.message(
            f"round {previous}: the agent submitted; twin's candidate-side checks found {len(failing)} failing"
        )
        return Reprompt(failing=failing)

    def failing_checks(self, round: int) -> list[str]:
        """twin's built-in candidate-side checks on round `round`'s snapshot: the violated ones, one line each."""
        from probes.suite import builtin_checks, run_suite

        with tempfile.TemporaryDirectory(prefix="twin-checks-") as tmp:
            snapshot = self.s.repo.export(round, Path(tmp) / "candidate")
            with run_suite(
                self.s.task, snapshot, builtin_checks(self.s.task), sandbox_kind=self.s.config.sandbox
            ) as suite:
                results = suite.results
        return [
            f"{r.property.id} ({r.property.kind}): {r.property.description}" + _observed(r.observations, r.trace)
            for r in results
            if r.outcome.value == "violated"
        ]

    def work(self, t: int, reprompt: Reprompt) -> tuple[str, bool]:
        """Round t's agent run, from a fresh conversation; returns (a note for the round, whether it submitted)."""
        outcome = self.agent.run(
            prompting.render("base_system", candidate_dir=self.s.task.settings.candidate_mount),
            self.task_message(t, reprompt),
        )
        submitted = outcome.exit == "submitted"
        return ("" if submitted else f"no submit within {outcome.steps} model calls"), submitted

    def budget_left(self) -> str:
        """What the agent's prompt says of its budget: what the run has left, and its model calls this round."""
        return budget_text(self.s.config.budget, self.s.budget.spent, steps=self.s.config.base_steps)

    def task_message(self, t: int, reprompt: Reprompt) -> str:
        return prompting.render(
            "base_task",
            round=t,
            instruction=self.s.task.instruction,
            candidate_dir=self.s.task.settings.candidate_mount,
            step_limit=reprompt.step_limit,
            failing=reprompt.failing,
            budget=self.budget_left(),
        )


def _observed(observations: dict, trace: str, limit: int = 300) -> str:
    """A check's own word on what it saw (its message, else its trace's last line), cut short."""
    said = observations.get("message") or observations.get("reason") or observations.get("error")
    seen = str(said or "") or (trace.strip().splitlines() or [""])[-1]
    seen = " ".join(seen.split())
    return f" — {seen[:limit]}" if seen else ""
