"""Each twin round's budget plan, and what each role is given of it (its prompt's text, its share's watch).

The plan is made when the round starts (`RoundPlan.make`: what is left of the run's budget, split by
the run's `budget_shares`) and kept in the round's state, so a resumed round keeps the plan it began
with. Each role's prompt states what the run has left when the role starts and its share of the round;
`ShareWatch` tells the agent loop when the role has reached it (`harness.models.budget_plan`).
"""

from __future__ import annotations

from harness.models.budget_plan import RoundPlan, ShareWatch, budget_text
from harness.run.session import Session

SHARE_SPENT_NOTE = "twin submitted for the {role} at its budget share (it had not submitted); its work so far is kept"


class RoundBudgets:
    """The budget plan of every round of one session."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def plan(self, t: int) -> RoundPlan:
        """Round t's plan, made at its first call and kept in its state."""
        rs = self.s.state.round_state(t)
        if rs.budget_plan is None:
            rs.budget_plan = RoundPlan.make(self.s.config.budget, self.s.budget.spent, self.s.config.budget_shares)
        return rs.budget_plan

    def for_role(self, t: int, role: str, steps: int) -> tuple[str, ShareWatch | None]:
        """What `role`'s prompt says of its budget in round t, and the watch of its share (None where the run
        sets no limit: nothing to share)."""
        share = self.plan(t).shares[role]
        policy = self.s.config.budget_shares
        spent = self.s.budget.spent
        text = budget_text(self.s.config.budget, spent, steps=steps, share=share, fraction=policy.of(role))
        if not share.kinds():
            return text, None
        return text, ShareWatch(role, share, policy.margin, lambda: self.s.budget.spent, spent)
