"""The base scaffold: one agent, the instruction, and ordinary continuation rounds.

Same agent loop, model, tools and sandboxes as the twin loop, but no roles, no
probes and no evidence: the baseline of 002 §5. Each round is a fresh
conversation that is told to continue the work in /app; every round's candidate
is committed and tagged like the twin loop's, so both are graded the same way.
"""

from __future__ import annotations

from ground.errors import BudgetExceeded
from harness.models.budget_plan import budget_text
from harness.run.progress import Progress
from harness.run.session import Session
from roles import prompting
from roles.agent import Agent
from roles.migrator import summary_submit_tool
from roles.tools import workbench_tools


class BaseScaffold:
    """Runs R continuation rounds of a single agent.

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
        try:
            for t in range(1, self.s.config.rounds + 1):
                rs = state.round_state(t)
                if "migrate" in rs.done:
                    continue
                self.s.repo.reset_to(t - 1)
                self.s.trajectory.set_context(round=t, step=0)
                self.progress.role(t, self.role)
                rs.note = self.work(t)
                rs.commit = self.s.repo.commit_round(t, "agent")
                rs.done.append("migrate")
                self.s.save(round=t)
            state.stop_reason = f"all {self.s.config.rounds} rounds done"
        except BudgetExceeded as exc:
            state.stop_reason = f"budget: {exc}"
            for rs in state.rounds:
                if "migrate" not in rs.done:
                    rs.commit = self.s.repo.commit_round(rs.round, "agent (stopped by budget)")
                    rs.note = "stopped by budget"
        state.final_round = state.choice_with_rounds(self.s.config.rounds)
        state.final_choice = f"{self.name}: the last round"
        state.status = "finished"
        self.s.save()

    def budget_left(self) -> str:
        """What the agent's prompt says of its budget: what the run has left, and its model calls this round."""
        return budget_text(self.s.config.budget, self.s.budget.spent, steps=self.s.config.base_steps)

    def work(self, t: int) -> str:
        """Round t's agent run, from a fresh conversation; returns a note for the round ('' if none)."""
        self.agent.run(
            prompting.render("base_system", candidate_dir=self.s.task.settings.candidate_mount),
            prompting.render(
                "base_task",
                round=t,
                instruction=self.s.task.instruction,
                candidate_dir=self.s.task.settings.candidate_mount,
                budget=self.budget_left(),
            ),
        )
        return ""
