"""The Verifier's probe desk: where its probe files are kept, run and recorded.

Probe files live in `runs/<id>/probes/` (outside the candidate, never mounted
writable for any role). Running one goes through the probe runner with the
task's sandboxes (the candidate side with torch absent) and appends every result
to the evidence store for the current round. `rerun_all()` re-runs the built-in
checks, every counterexample confirmed so far (its regression probe) and every
probe written so far, so each round's candidate is judged on the same properties
as the round before: that is how regressions are seen.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path

from evidence_store import numbers, reading
from evidence_store.records import EvidenceRecord, Outcome, ProbeResult, Property
from evidence_store.store import EvidenceStore
from evidence_store.views import tally, tally_text
from ground.errors import BudgetExceeded
from probes.interface_checks import check_plan
from probes.probe_format import PLANTED_KIND, PROBE_FILE_KIND, stated_ids
from probes.round_localization import localize_round
from probes.suite import PROBE_FILE_FORMAT, builtin_checks, load_probe_file
from task_model.model import Task

# (results recorded) -> None; lets the progress view keep its tally.
RecordedHook = Callable[[list[EvidenceRecord]], None]


class RunProbeDesk:
    """Implements `roles.verifier.ProbeDesk` for one run.

    Args:
        task: the loaded task.
        candidate: the candidate work tree (host path).
        probes_dir: where probe files are kept.
        store: the run's evidence store.
        run_id: the run id recorded with each result.
        sandbox_kind: sandbox for the probe runner.
        audit_log: the run's audit log.
        commit: returns the candidate commit the results are taken on.
        on_recorded: called with the records of every batch.
        search_budget: the budget of the counterexample searches probe files state
            (`probes.services.probe_file.SearchBudget`; None: its defaults).
        budget: the run's budget (`harness.models.budget.BudgetTracker`; None: unlimited): no side
            of a probe runs past its wall time, and once that is spent no probe starts.
    """

    def __init__(
        self,
        task: Task,
        candidate: Path,
        probes_dir: Path,
        store: EvidenceStore,
        *,
        run_id: str,
        sandbox_kind: str,
        audit_log: Path | None,
        commit: Callable[[], str | None] = lambda: None,
        on_recorded: RecordedHook | None = None,
        search_budget=None,
        budget=None,
    ) -> None:
        self.task = task
        self.candidate = candidate
        self.probes_dir = probes_dir
        self.store = store
        self.run_id = run_id
        self.sandbox_kind = sandbox_kind
        self.audit_log = audit_log
        self.commit = commit
        self.on_recorded = on_recorded
        self.search_budget = search_budget
        self.budget = budget
        self.round = 0
        probes_dir.mkdir(parents=True, exist_ok=True)

    # ---- ProbeDesk ------------------------------------------------------------------------------
    def write_probe(self, name: str, source: str) -> str:
        path = self.probes_dir / f"{name}.py"
        if not source.strip():
            if not path.is_file():
                return f"no stored probe named {name}: nothing removed"
            path.unlink()
            self._supersede_errors(path, set(), removed=True)
            return f"removed probe {name}: it is no longer run"
        path.write_text(source)
        lines = [f"stored probe {name}"]
        mine = stated_ids(path)
        for other in sorted(self.probes_dir.glob("*.py")):
            shared = sorted(mine & stated_ids(other)) if other != path else []
            if shared:
                lines.append(
                    f"warning: probe {other.stem} states {', '.join(shared)} too: both record outcomes for the "
                    'same property. Give a copy its own "id", or mark a planted-fault copy "planted": True.'
                )
        return "\n".join(lines)

    def run_probe(self, name: str) -> str:
        path = self.probes_dir / f"{name}.py"
        if not path.is_file():
            return f"error: no stored probe named {name!r}; write it first with write_probe"
        return render_results(self._run_file(path))

    def run_checks(self) -> str:
        results = render_results(self._run(builtin_checks(self.task), origin="builtin"))
        ran, skipped = check_plan(self.task)
        lines = [results, "", f"ran: {', '.join(ran)}"]
        if skipped:
            lines.append("not run on this task (write a probe file with check_ functions for these):")
            lines += [f"- {line}" for line in skipped]
        return "\n".join(lines)

    def probe_format(self) -> str:
        return PROBE_FILE_FORMAT

    # ---- harness-driven ---------------------------------------------------------------------------
    def rerun_all(self) -> list[EvidenceRecord]:
        """Re-run the built-in checks and every stored probe on the current candidate."""
        records = self._run(builtin_checks(self.task), origin="builtin")
        records.extend(self._run(self.regression_probes(), origin="regression"))
        for path in sorted(self.probes_dir.glob("*.py")):
            records.extend(self._run_file(path))
        return records

    def regression_probes(self) -> list:
        """A probe per counterexample confirmed in an earlier round, replaying its shrunk input."""
        from probes.base import load_factory

        found = {
            r.property.id: r.context["rerun"]
            for r in self.store.records()
            if r.property.id.startswith("regression:") and r.round < self.round and "rerun" in r.context
        }
        probes = []
        for spec in found.values():
            if spec["factory"].startswith("probes.services."):  # only twin's own factories are re-run
                probes.append(load_factory(spec["factory"])(**spec["options"]))
        return probes

    def localize(self) -> EvidenceRecord:
        """Localize over this round's evidence and record it (`probes.round_localization`)."""
        latest = {r.property.id: r for r in self.store.records(round=self.round)}
        earlier = [r for r in self.store.records(property_id="localization") if r.round < self.round]
        result = localize_round(
            self.task.source_dir.resolve(),
            list(latest.values()),
            round=self.round,
            previous=earlier[-1] if earlier else None,
        )
        result.context["candidate_commit"] = self.commit()
        # Not handed to `on_recorded`: the live tally counts the candidate's own properties.
        record = EvidenceRecord.from_result(result, run_id=self.run_id, round=self.round)
        record.record_id = self.store.append(record)
        return record

    def latest_localization(self, up_to_round: int) -> EvidenceRecord | None:
        """The latest localization record up to a round (None before the first)."""
        found = [r for r in self.store.records(property_id="localization") if r.round <= up_to_round]
        return found[-1] if found else None

    def _run_file(self, path: Path) -> list[EvidenceRecord]:
        try:
            probes = load_probe_file(path, self.search_budget)
        except Exception as exc:  # a broken probe file is the probe's fault, not the candidate's
            result = ProbeResult(
                property=Property(id=f"probe:{path.stem}", kind="differential", level=1),
                outcome=Outcome.NOT_ESTABLISHED,
                trace="".join(traceback.format_exception_only(type(exc), exc)),
                context={"probe_file": path.name},
            )
            return self._record([result])
        records = self._run(probes, origin=path.name)
        return records + self._supersede_errors(path, {r.property.id for r in records})

    def _supersede_errors(self, path: Path, produced: set[str], *, removed: bool = False) -> list[EvidenceRecord]:
        """Record that a probe file's earlier errors no longer stand: it loaded and its probes ran, or it is gone.

        A file that failed to load, or a probe of it that raised, left `probe:<stem>` (or
        `probe:<stem>:checks`, ...) not established. Records are never edited, so a later
        record of the same id, of kind `PROBE_FILE_KIND` (about the probe, not counted
        among the candidate's properties), takes its place as the latest: established
        when the file ran, not established when it was removed (nothing was examined); an
        id this run recorded again keeps that new record.
        """
        own = f"probe:{path.stem}"
        stale = [
            record
            for pid, record in self.store.latest().items()
            if (pid == own or pid.startswith(own + ":"))
            and pid not in produced
            and record.property.kind != PROBE_FILE_KIND
        ]
        what = "was removed" if removed else "loads and its probes run"
        results = [
            ProbeResult(
                property=Property(
                    id=record.property.id,
                    kind=PROBE_FILE_KIND,
                    level=record.property.level,
                    description=f"probe file {path.name} {what}",
                ),
                outcome=Outcome.NOT_ESTABLISHED if removed else Outcome.ESTABLISHED,
                context={"probe_file": path.name, "origin": path.name},
                observations={"message": f"supersedes the error recorded in round {record.round}"},
            )
            for record in stale
        ]
        return self._record(results) if results else []

    def _run(self, probes: list, *, origin: str) -> list[EvidenceRecord]:
        from probes.suite import run_suite

        with run_suite(
            self.task,
            self.candidate,
            probes,
            sandbox_kind=self.sandbox_kind,
            audit_log=self.audit_log,
            candidate_commit=self.commit(),
            deadline=self.deadline(),
        ) as suite:
            results = suite.results
        for result in results:
            result.context.setdefault("origin", origin)
        return self._record(results)

    def deadline(self) -> float | None:
        """When the run's wall budget ends, on `time.monotonic()`'s clock (None: no wall budget).

        Raises:
            BudgetExceeded: the wall budget is spent: no probe starts.
        """
        left = self.budget.wall_left() if self.budget is not None else None
        if left is None:
            return None
        if left <= 0:
            raise BudgetExceeded("wall_time", self.budget.budget.max_wall_s, self.budget.spent.wall_s)
        return time.monotonic() + left

    def _record(self, results: list[ProbeResult]) -> list[EvidenceRecord]:
        records = [EvidenceRecord.from_result(r, run_id=self.run_id, round=self.round) for r in results]
        ids = self.store.append_many(records)
        for record, record_id in zip(records, ids, strict=True):
            record.record_id = record_id
        if self.on_recorded is not None:
            self.on_recorded(records)
        return records


TRACE_LINES = 12
"""Lines of a trace's tail shown with a property that did not hold (to fix a probe by)."""

_LABEL = {Outcome.ESTABLISHED: "ESTABLISHED", Outcome.VIOLATED: "VIOLATED", Outcome.NOT_ESTABLISHED: "NOT ESTABLISHED"}


def render_results(records: list[EvidenceRecord]) -> str:
    """The outcomes for the model, in the reader's format of `evidence_store.reading`.

    A property that did not hold shows its failing outputs as distance against tolerance,
    and the tail of its trace; passing outputs are counted, with the few closest to their
    tolerance (`reading.property_block` with margins), so a probe of many outputs stays short.
    A planted-fault copy that fails, as it was meant to, is one line with its count
    (`planted_line`): its failing outputs are the fault's, kept whole in the evidence.
    """
    if not records:
        return "no properties were examined"
    counts = tally({r.property.id: r for r in records})
    lines = [f"{sum(counts.values())} properties recorded: {tally_text(counts)}"]
    for record in records:
        if record.property.kind == PLANTED_KIND and record.outcome is Outcome.VIOLATED:
            lines.append(planted_line(record))
            continue
        label = _LABEL[Outcome(record.outcome)] + (f" ({reading.REIMPLEMENTED})" if record.reimplemented else "")
        lines.append(reading.property_block(record, label, margins=True))
        tail = [ln for ln in record.trace.strip().splitlines() if ln.strip()][-TRACE_LINES:]
        # One line is already the `why` line, unless it was too long to show whole there (a probe
        # file's load error names what it refused and the forms it accepts).
        cut = len(tail) == 1 and numbers.budget_length(tail[0]) > reading.TEXT_CHARS
        if record.outcome is not Outcome.ESTABLISHED and (len(tail) > 1 or cut):
            lines.append("    trace (last lines):\n" + "\n".join(f"      {ln}" for ln in tail))
    return "\n".join(lines)


def planted_line(record: EvidenceRecord) -> str:
    """A violated planted-fault copy in one line: the fault was caught, and how many outputs show it.

    Its failing outputs say nothing about the candidate (the fault is the probe author's own),
    so they are counted here, never listed; `twin evidence` keeps each of them.
    """
    _, passing, failing = reading.failing_lines(record)
    if failing:
        what = f"{failing} of {failing + passing} outputs fail" if passing else f"all {failing} outputs fail"
        what += " (listed in the evidence, not here)"
    else:
        what = reading.reason(record) or "violated"
    head = f"- VIOLATED {record.property.id} ({record.property.kind}, L{record.property.level})"
    return f"{head}: the planted fault is caught: {what}"
