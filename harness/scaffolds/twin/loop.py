"""The diagnose–migrate–verify loop: J_{t-1} → D_t → J_t → E_t, for up to R rounds.

Each step is recorded in `state.json` when it completes, so a killed run resumes at
the first incomplete step (a half-done Migrator step is discarded: the candidate
goes back to the previous round's commit). Leaving the loop early is a `StopRun`
carrying its reason; a budget running out is a `BudgetExceeded` from the model.
"""

from __future__ import annotations

from evidence_store.records import EvidenceRecord, Outcome
from evidence_store.store import EvidenceStore
from evidence_store.views import NON_CANDIDATE_KINDS, candidate_latest, round_tally
from ground.errors import BudgetExceeded
from harness.run.audit import read_refusals
from harness.run.final_choice import settle
from harness.run.progress import Progress
from harness.run.session import Session
from harness.scaffolds.twin.handoff import handoff_text
from harness.scaffolds.twin.objectives import all_shown, evidence_diagnosis, holds, objective_statuses
from harness.scaffolds.twin.probe_desk import RunProbeDesk
from harness.scaffolds.twin.round_budget import SHARE_SPENT_NOTE, RoundBudgets
from harness.scaffolds.twin.run_records import refusal_records, report_records, unchecked_records
from probes.round_localization import render_localization
from roles.diagnoser import Diagnoser
from roles.fence import HarnessText, fence_agent_text
from roles.migrator import Migrator
from roles.role import RoundBrief
from roles.schemas import Diagnosis, VerifierReport
from roles.verifier import Verifier


class StopRun(Exception):
    """The loop ends before R rounds; the message is the reason."""


class TwinLoop:
    """Drives the three roles over one session; see the module docstring."""

    def __init__(self, session: Session, progress: Progress) -> None:
        self.s = session
        self.progress = progress
        self.store = EvidenceStore(session.run.evidence)
        self.store.record_run(session.state.run_id, session.config.model_dump(mode="json"))
        self.desk = RunProbeDesk(
            session.task,
            session.run.candidate,
            session.run.probes,
            self.store,
            run_id=session.state.run_id,
            sandbox_kind=session.config.sandbox,
            audit_log=session.run.audit_log,
            commit=session.repo.head,
            on_recorded=progress.evidence,
            budget=session.budget,
        )
        observers = {
            "on_tool": session.record_tool,
            "on_step": session.step_observer(progress),
            "context": session.context_policy,
            "budget_check": session.budget.check_tool,
        }
        c = session.config
        self.budgets = RoundBudgets(session)
        self.reran = 0  # the last round whose re-run of the checks and earlier probes completed
        self.steps = {"diagnoser": c.diagnoser_steps, "migrator": c.migrator_steps, "verifier": c.verifier_steps}
        self.diagnoser = Diagnoser(
            session.model, session.workbench("diagnoser", write=False), max_steps=c.diagnoser_steps, **observers
        )
        self.migrator = Migrator(
            session.model, session.workbench("migrator", write=True), max_steps=c.migrator_steps, **observers
        )
        self.verifier = Verifier(
            session.model,
            session.workbench("verifier", write=False),
            self.desk,
            max_steps=c.verifier_steps,
            **observers,
        )

    # ---- the loop, on one screen ------------------------------------------------------------------
    def run(self) -> None:
        state = self.s.state
        try:
            for t in range(1, self.s.config.rounds + 1):
                self.round(t)
                self.s.snapshot_round(t)
                self.guard(t)
            state.stop_reason = f"all {self.s.config.rounds} rounds done"
        except BudgetExceeded as exc:
            state.stop_reason = f"budget: {exc}"
            self.finish_interrupted_round()
        except StopRun as exc:
            state.stop_reason = str(exc)
        state.status = "finished"
        self.choose_final()
        self.s.save()

    def round(self, t: int) -> None:
        rs = self.s.state.round_state(t)
        self.budgets.plan(t)  # what is left, split between the roles before the first of them starts
        if "migrate" not in rs.done:
            self.s.repo.reset_to(t - 1)  # discard a half-done Migrator step of a killed run
        if "diagnose" not in rs.done:
            self.complete(t, "diagnose", self.diagnose(t))
        if self.nothing_left(t):
            raise StopRun(f"round {t}: the Diagnoser found nothing left and every property is established")
        if "migrate" not in rs.done:
            summary = self.migrate(t)
            rs.commit = self.s.repo.commit_round(t, "migrator")
            self.store.record_round(self.s.state.run_id, t, candidate_commit=rs.commit, note=summary)
            self.complete(t, "migrate")
        if "verify" not in rs.done:
            if t > 1 and not self.s.repo.changed(t - 1, t):
                # the same tree as the verified round before: its evidence stands, no model re-runs it
                rs.evidence_score = self.s.state.round_state(t - 1).evidence_score
                self.progress.message(f"round {t}: the Migrator changed nothing; round {t - 1}'s evidence stands")
                self.complete(t, "verify", f"unchanged since round {t - 1}: not verified again")
                return
            self.verify(t)
            rs.evidence_score = self.evidence_score(t)
            self.complete(t, "verify")

    def nothing_left(self, t: int) -> bool:
        """Round t's Diagnoser reported complete, and the evidence after round t−1 holds properties,
        every one established (none violated, none not established, none only against a re-implementation
        of an interface component: `objectives.holds`): nothing for a Migrator to do."""
        if t < 2:
            return False
        records = self.store.diagnoses(round=t)
        if not records or not Diagnosis.model_validate(records[-1].diagnosis).complete:
            return False
        latest = self.candidate_latest(t - 1)
        return bool(latest) and all(holds(r) for r in latest.values())

    def shown_by_rerun(self, t: int) -> bool:
        """After round t's re-run of every earlier probe, nothing is left for a Verifier: every
        property is established and every entry of the diagnosis's gaps names one of them.
        A Diagnoser that wants something new checked names a new property id in `probes`."""
        latest = self.candidate_latest(t)
        everything_holds = bool(latest) and all(holds(r) for r in latest.values())
        return t > 1 and everything_holds and all_shown(self.diagnosis(t), latest)

    def guard(self, t: int) -> None:
        """Decide whether to go on after round t."""
        if self.regressions(t):
            self.progress.message(f"round {t} regressed: {', '.join(self.regressions(t))}")
        latest = self.candidate_latest(t)
        diagnosis = self.diagnosis(t)
        if (
            latest
            and all(holds(r) for r in latest.values())
            and (diagnosis is not None and diagnosis.complete)
        ):
            raise StopRun(f"every property established after round {t}")
        repo = self.s.repo
        if t >= 2 and not repo.changed(t - 2, t - 1) and not repo.changed(t - 1, t):
            raise StopRun(f"rounds {t - 1} and {t} changed nothing")

    # ---- the three steps ---------------------------------------------------------------------------
    def diagnose(self, t: int) -> str:
        self.enter(t, "diagnoser")
        budget, share = self.budgets.for_role(t, "diagnoser", self.steps["diagnoser"])
        outcome = self.diagnoser.run(
            RoundBrief(
                round=t,
                budget=budget,
                share=share,
                candidate_dir=self.s.task.settings.candidate_mount,
                instruction=self.s.task.instruction,
                evidence=self.evidence_text(t - 1),
                regressions=self.regression_text(t - 1),
                candidate_files=fence_agent_text("file names in /app", "\n".join(self.s.repo.files()[:300])),
                objectives=self.objectives_status(t - 1),
                unchecked=self.unchecked(t - 1),
                migrator_summary=fence_agent_text("summary by the Migrator", self.migrator_summary(t - 1)),
                verifier_summary=fence_agent_text("summary by the Verifier", self.verifier_summary(t - 1)),
            )
        )
        diagnosis, note = outcome.output, ""
        if diagnosis is None:
            why = "diagnosis invalid or missing"
            if outcome.exit == "share_spent":
                why = "the Diagnoser reached its budget share without a diagnosis"
                self.progress.message(f"round {t}: {SHARE_SPENT_NOTE.format(role='Diagnoser')}")
            diagnosis, note = self.fallback_diagnosis(t), f"{why}: derived from evidence"
        self.store.record_diagnosis(self.s.state.run_id, t, diagnosis)
        return note

    def evidence_text(self, t: int) -> str:
        """The evidence after round t as the Diagnoser reads it (and the Migrator, from round 2)."""
        return fence_agent_text(
            "evidence",
            render_localization(self.desk.latest_localization(t))
            + self.store.render_for_prompt(self.s.config.evidence_chars, up_to_round=t),
            limit=self.evidence_limit,
        )

    @property
    def evidence_limit(self) -> int:
        """The fence never cuts what the renderer already kept whole within its budget."""
        return max(20_000, 2 * self.s.config.evidence_chars)

    def migrate(self, t: int) -> str:
        """Run the Migrator; return its summary of what it changed."""
        self.enter(t, "migrator")
        budget, share = self.budgets.for_role(t, "migrator", self.steps["migrator"])
        outcome = self.migrator.run(
            RoundBrief(
                round=t,
                budget=budget,
                share=share,
                candidate_dir=self.s.task.settings.candidate_mount,
                instruction=self.s.task.instruction,
                diagnosis=fence_agent_text("diagnosis by the Diagnoser", self.diagnosis(t).render()),
                regressions=self.regression_text(t - 1),
                evidence=self.evidence_text(t - 1) if t > 1 else "",
                cited_sources=self.cited_sources(t),
            )
        )
        if outcome.exit == "share_spent":
            note = SHARE_SPENT_NOTE.format(role="Migrator")
            self.progress.message(f"round {t}: {note}")
            self.s.state.round_state(t).note = note
            return note
        return str(outcome.output or "")

    def cited_sources(self, t: int) -> str:
        """The spans of the original round t's diagnosis cites, as the Migrator reads them (`handoff`)."""
        settings, limit = self.s.task.settings, self.s.config.handoff_chars
        text = handoff_text(self.diagnosis(t), self.s.task.source_dir, settings.source_mount, limit) if limit else ""
        label = "the original's text at the spans the diagnosis cites"
        return fence_agent_text(label, text, limit=limit + 2000) if text else ""

    def verify(self, t: int) -> None:
        self.enter(t, "verifier")
        self.desk.round = t
        self.desk.rerun_all()
        self.reran = t
        self.progress.role(t, "verifier")  # the live counts after the re-run, as the Verifier reads them
        if self.shown_by_rerun(t):
            self.progress.message(f"round {t}: the re-run probes show every objective done; no Verifier is called")
            # what an earlier Verifier could not examine is still unexamined: the next Diagnoser reads it
            carried = [
                r.model_copy(update={"round": t, "record_id": None})
                for r in self.store.records(round=t - 1, kind="unchecked")
            ]
            if carried:
                self.store.append_many(carried)
            self.desk.localize()
            return
        budget, share = self.budgets.for_role(t, "verifier", self.steps["verifier"])
        outcome = self.verifier.run(
            RoundBrief(
                round=t,
                budget=budget,
                share=share,
                candidate_dir=self.s.task.settings.candidate_mount,
                instruction=self.s.task.instruction,
                diagnosis=fence_agent_text("diagnosis by the Diagnoser", self.diagnosis(t).render()),
                evidence=fence_agent_text(
                    "evidence",
                    self.store.render_for_prompt(self.s.config.evidence_chars, up_to_round=t),
                    limit=self.evidence_limit,
                ),
                migrator_summary=fence_agent_text("summary by the Migrator", self.migrator_summary(t)),
                changed_files=self.s.repo.diff_stat(t - 1, t),
            )
        )
        if isinstance(outcome.output, VerifierReport):
            self.record_unchecked(t, outcome.output)
            self.record_report(t, outcome.output)
        elif outcome.exit == "share_spent":
            note = SHARE_SPENT_NOTE.format(role="Verifier")
            self.progress.message(f"round {t}: {note}")
            self.record_report(t, VerifierReport(summary=f"({note}; its probes' outcomes are the evidence)"))
        self.desk.localize()

    # ---- bookkeeping -------------------------------------------------------------------------------
    def enter(self, t: int, role: str) -> None:
        self.s.trajectory.set_context(round=t, step=0)
        self.progress.role(t, role)

    def complete(self, t: int, step: str, note: str = "") -> None:
        self.record_refusals(t)
        rs = self.s.state.round_state(t)
        rs.done.append(step)  # type: ignore[arg-type]
        rs.note = note or rs.note
        self.s.save(round=t)

    def record_refusals(self, t: int) -> None:
        """Every refusal the boundary wrote to the audit log becomes evidence too."""
        state = self.s.state
        refusals, state.audit_offset = read_refusals(self.s.run.audit_log, state.audit_offset)
        self.append(refusal_records(state.run_id, t, refusals))

    def record_unchecked(self, t: int, report: VerifierReport) -> None:
        self.append(unchecked_records(self.s.state.run_id, t, report))

    def record_report(self, t: int, report: VerifierReport) -> None:
        self.append(report_records(self.s.state.run_id, t, report))

    def append(self, records: list[EvidenceRecord]) -> None:
        if records:
            self.store.append_many(records)

    def verifier_summary(self, t: int) -> str:
        return next((str(r.observations.get("summary", "")) for r in self.store.records(round=t, kind="report")), "")

    def unchecked(self, t: int) -> list[tuple[str, str]]:
        """(property, why) of what round t's Verifier reported it could not examine."""
        return [
            (r.property.id.removeprefix("unchecked:"), str(r.observations.get("reason", "")))
            for r in self.store.records(round=t, kind="unchecked")
        ]

    def migrator_summary(self, t: int) -> str:
        return next((r.note for r in self.store.rounds() if r.round == t and r.note), "")

    def objectives_status(self, t: int) -> list[tuple[str, str]]:
        """Round t's diagnosis objectives, each 'done' or 'open' after round t (`objectives`)."""
        if t < 1 or not self.store.diagnoses(round=t):
            return []
        return objective_statuses(self.diagnosis(t), self.candidate_latest(t))

    def finish_interrupted_round(self) -> None:
        """After a budget stop mid-round, keep the Migrator's work as that round's snapshot, and verify it
        by the re-run of the built-in checks and every probe while the wall budget lasts: no round ends
        with a changed candidate and no verification while that can still run (no model call is made)."""
        for rs in self.s.state.rounds:
            if "diagnose" in rs.done and "migrate" not in rs.done:
                rs.commit = self.s.repo.commit_round(rs.round, "migrator (stopped by budget)")
                rs.note = "stopped by budget during migration; not verified"
                self.verify_by_rerun(rs.round, "stopped by budget during migration")
            elif "migrate" in rs.done and "verify" not in rs.done:
                self.verify_by_rerun(rs.round, "the budget stopped the Verifier")
            if rs.commit:
                self.s.snapshot_round(rs.round)

    def verify_by_rerun(self, t: int, why: str) -> None:
        """Score round t on the re-run of the built-in checks and every probe (run now unless the round's
        verify step already completed it); left unverified when the wall budget is spent."""
        rs = self.s.state.round_state(t)
        if t > 1 and not self.s.repo.changed(t - 1, t):
            rs.evidence_score = self.s.state.round_state(t - 1).evidence_score
            rs.note = f"{why}; unchanged since round {t - 1}: its evidence stands"
            return
        if self.reran != t:
            self.s.trajectory.set_context(round=t, step=0)
            self.desk.round = t
            try:
                self.desk.rerun_all()
                self.desk.localize()
            except BudgetExceeded:
                return
            self.reran = t
        rs.evidence_score = self.evidence_score(t)
        rs.note = f"{why}; verified by the re-run of the built-in checks and every probe only (no Verifier)"

    def diagnosis(self, t: int) -> Diagnosis:
        records = self.store.diagnoses(round=t)
        return Diagnosis.model_validate(records[-1].diagnosis) if records else self.fallback_diagnosis(t)

    def fallback_diagnosis(self, t: int) -> Diagnosis:
        """Gaps from what the evidence after round t−1 shows is violated or unresolved."""
        return evidence_diagnosis(self.candidate_latest(t - 1))

    def candidate_latest(self, t: int) -> dict:
        return candidate_latest(self.store.latest(up_to_round=t))

    def regressions(self, t: int) -> list[str]:
        if t < 2:
            return []
        moved = self.store.transitions(t - 1, t).regressions
        # the localization, a planted fault or a refusal regressing says nothing about the candidate
        return sorted(c.property_id for c in moved if c.after.property.kind not in NON_CANDIDATE_KINDS)

    def regression_text(self, t: int) -> str:
        ids = self.regressions(t)
        if not ids:
            return ""
        return HarnessText(  # harness prose around the agent-named ids, fenced here
            f"Round {t} turned these established properties into violated ones (ids below). "
            "Restore them before anything else.\n" + fence_agent_text("property ids", ", ".join(ids))
        )

    def evidence_score(self, t: int) -> int:
        """Established minus violated in the state after round t (`views.round_tally`, as every view counts)."""
        counts = round_tally(self.store, t, candidate_only=True)
        return counts[Outcome.ESTABLISHED.value] - counts[Outcome.VIOLATED.value]

    def choose_final(self) -> None:
        """The final candidate by the run's rule (`final_choice`: by default the best verified round by
        evidence, ties to the latest), with every round's eligibility said."""
        settle(self.s.state, self.s.config.rounds, self.s.config.final_rule)
