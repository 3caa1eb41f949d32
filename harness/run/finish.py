"""After the run, never before: grade every round's snapshot with the task's unchanged grader.

Nothing here reaches any role: the run is over when grading starts. Writes
`grades.json` (typed, versioned) and `summary.md`.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from benchmark_adapter.grading.grader import run_grader
from evidence_store import numbers
from evidence_store.store import EvidenceStore
from evidence_store.views import round_tally
from ground.agent_tree import discard_tree
from ground.errors import TwinError
from ground.untrusted_io import AgentFileError, read_regular_text, write_text_atomic
from harness.run.directory import RunConfig, RunDir, RunState
from harness.run.figures import shows_evidence, spent_line
from harness.run.final_choice import settle
from harness.run.snapshots import SnapshotGrade, curve_lines

GRADES_VERSION = 2
"""2: `snapshots`, the grades of the snapshots taken while the run worked (1 had none; still read)."""


class RoundGrade(BaseModel):
    """The grade of one round's snapshot."""

    round: int
    commit: str | None = None
    reward: float | None = Field(
        default=None,
        description="The grader's reward; 0 when it failed on the candidate; None only when twin's "
        "own machinery failed (an infrastructure failure, retried by benches).",
    )
    components: dict[str, Any] = Field(default_factory=dict)
    error: str = Field(
        default="",
        description="Why the reward is 0 (the grader failed on the candidate) or missing (infrastructure).",
    )
    duration_s: float = 0.0
    same_as: int | None = Field(default=None, description="Round with an identical tree, grade reused.")
    output: str | None = Field(
        default=None,
        description="The grader's output (its tail), relative to the run directory: why a reward is what it is.",
    )

    @property
    def why(self) -> str:
        """Why the reward is 0 or missing, in one line ("" for a reward above 0)."""
        if self.reward is None:
            return f"infrastructure, not the candidate's score: {self.error or 'unknown'}"
        if self.reward > 0.0:
            return ""
        return self.error or "the grader scored the candidate 0"


class RunGrades(BaseModel):
    """`grades.json`: every round's grade and the final candidate's."""

    schema_version: int = GRADES_VERSION
    run_id: str
    task: str
    scaffold: str
    model: str
    final_round: int | None
    rounds: list[RoundGrade]
    snapshots: list[SnapshotGrade] = Field(
        default_factory=list,
        description="Each snapshot's grade (`--grade-snapshots`): the run's reward as a curve over what it spent.",
    )

    @property
    def final(self) -> RoundGrade | None:
        return next((g for g in self.rounds if g.round == self.final_round), None)


def grade_rounds(session: Any, progress: Any, earlier: RunGrades | None = None) -> RunGrades:
    """Grade each committed round (reusing the grade of an identical earlier tree).

    Args:
        earlier: the run's grades from before (a resumed run): a round graded then, on the
            same commit, keeps its grade; one whose grading failed on twin's side (reward
            None: host out of disk, sandbox not starting) is graded again.
    """
    s = session
    kept = {g.round: g for g in (earlier.rounds if earlier else []) if g.reward is not None}
    grades: list[RoundGrade] = []
    for rs in sorted(s.state.rounds, key=lambda r: r.round):
        if not rs.commit:
            continue
        if (old := kept.get(rs.round)) is not None and old.commit == rs.commit:
            grades.append(old)
            continue
        try:
            grades.append(_grade_round(s, rs, grades[-1] if grades else None, progress))
        except Exception as exc:  # twin's own bug on this round's snapshot: recorded, the other rounds graded
            record_crash(s, exc)
            grades.append(RoundGrade(round=rs.round, commit=rs.commit, error=f"internal error: {exc}"[:500]))
    result = RunGrades(
        run_id=s.state.run_id,
        task=s.task.name,
        scaffold=s.config.scaffold,
        model=s.model_label,
        final_round=s.state.final_round,
        rounds=grades,
    )
    write_text_atomic(s.run.grades, result.model_dump_json(indent=2))
    return result


def earlier_grades(run: RunDir) -> RunGrades | None:
    """The run's `grades.json` from before (a resumed run), None when there is none or it cannot be read."""
    try:
        return RunGrades.model_validate_json(run.grades.read_text())
    except (OSError, ValueError):  # unreadable: every round is graded again
        return None


def _grade_round(s: Any, rs: Any, previous: RoundGrade | None, progress: Any) -> RoundGrade:
    """One round's grade: the previous round's again when the tree is the same, else the grader's."""
    if previous is not None and not s.repo.changed(previous.round, rs.round):
        reused = previous.model_copy(update={"round": rs.round, "commit": rs.commit})
        reused.same_as = previous.same_as or previous.round
        return reused
    progress.message(f"grading round {rs.round} with the task's own grader")
    with tempfile.TemporaryDirectory(prefix="twin-grade-") as tmp:
        try:
            snapshot = s.repo.export(rs.round, Path(tmp) / "candidate")
            grade = run_grader(s.task, snapshot, sandbox=s.config.sandbox, audit_log=s.run.audit_log)
        except (TwinError, OSError) as exc:  # infrastructure: never scored as 0
            output = _keep_output(s.run, rs.round, getattr(exc, "log_tail", ""))
            return RoundGrade(round=rs.round, commit=rs.commit, error=str(exc)[:500], output=output)
    return RoundGrade(
        round=rs.round,
        commit=rs.commit,
        reward=grade.reward,  # a grader failing on the candidate scores 0
        components=grade.components,
        duration_s=grade.duration_s,
        error=grade.error or "",
        output=_keep_output(s.run, rs.round, grade.log_tail),
    )


GRADING_DIR = "grading"
"""Where a run keeps each graded round's grader output (`grading/round-<n>.txt`)."""


def _keep_output(run: RunDir, round: int, log_tail: str) -> str | None:
    """Write the grader's output of `round` into the run directory; its path there, None when there was none.

    A failed write (the host out of disk) loses the output, never the grade.
    """
    if not log_tail:
        return None
    relative = f"{GRADING_DIR}/round-{round}.txt"
    try:
        (run.root / GRADING_DIR).mkdir(exist_ok=True)
        write_text_atomic(run.root / relative, log_tail)
    except OSError:
        return None
    return relative


def record_crash(session: Any, exc: BaseException) -> None:
    """A bug of twin's met on agent input: the state `failed` and resumable, the traceback in `crash.txt`.

    The rounds committed so far keep their place (the final choice among them) and get
    graded; `twin migrate --resume` continues from the last complete step.
    """
    import traceback

    session.state.status = "failed"
    session.state.stop_reason = f"error: {type(exc).__name__}: {str(exc)[:300]}"
    config = session.config
    settle(session.state, config.rounds, config.final_rule, evidence=shows_evidence(config.scaffold))
    session.save()
    with open(session.run.root / "crash.txt", "a", encoding="utf-8") as fh:
        fh.write("".join(traceback.format_exception(exc)))


def write_summary(session: Any, grades: RunGrades | None) -> str:
    """Write `summary.md` and return it.

    Its figures are the state's, rendered by `figures` (the same text ends `twin migrate`);
    a scaffold without evidence (`figures.shows_evidence`) gets no evidence columns.
    """
    s = session
    state, config = s.state, s.config
    evidence = shows_evidence(config.scaffold)
    counters = "established | violated | not established | " if evidence else ""
    lines = [
        f"# twin run {state.run_id}",
        "",
        f"- task: `{s.task.name}`",
        f"- scaffold: {config.scaffold}",
        f"- model: {s.model_label}",
        f"- rounds: {len(state.rounds)} of {config.rounds} ({state.stop_reason or state.status})",
        f"- final candidate: round {state.final_round} — {state.final_choice}",
        f"- spent: {spent_line(state)}",
        *([f"- the Migrator's reads of the original: {source_reads(s)}"] if evidence else []),
        *([f"- {state.snapshots_stopped.line()}"] if state.snapshots_stopped is not None else []),
        "",
        f"| round | commit | model calls | tokens | {counters}reward |",
        "|---|---|---|---|" + ("---|---|---|" if evidence else "") + "---|",
    ]
    by_round = {g.round: g for g in (grades.rounds if grades else [])}
    tallies = evidence_tallies(s.run, [rs.round for rs in state.rounds]) if evidence else {}
    for rs in sorted(state.rounds, key=lambda r: r.round):
        tally = tallies.get(rs.round, Counter())
        grade = by_round.get(rs.round)
        reward = "-" if grade is None else (numbers.reward(grade.reward) if grade.reward is not None else "not graded")
        counts = f"{tally['established']} | {tally['violated']} | {tally['not_established']} | " if evidence else ""
        lines.append(
            f"| {rs.round} | {(rs.commit or '-')[:10]} | {rs.model_calls} | {rs.tokens:,} | {counts}{reward} |"
        )
    final = grades.final if grades else None
    if final is not None and final.components:
        lines += ["", f"## Grade of the final candidate (round {final.round})", ""]
        lines += [f"- {name}: {value}" for name, value in sorted(final.components.items())]
    if grades is not None and grades.snapshots:
        lines += ["", *curve_lines(grades.snapshots)]
    lines += _zero_reasons(s.run, grades)
    text = "\n".join(lines) + "\n"
    write_text_atomic(s.run.summary, text)
    return text


SUMMARY_OUTPUT_LINES = 12
SOURCE_READ_TOOLS = frozenset({"read_file", "bash", "bash_reference"})


def source_reads(session: Any) -> str:
    """How often the Migrator read the original: its `read_file` calls and commands naming the original's
    mount (`/source`), in all and per round. What the diagnosis handed it should keep this low."""
    mount = session.task.settings.source_mount.rstrip("/")
    per_round: Counter = Counter()
    for record in session.trajectory.records():
        if record.type != "tool_call" or record.role != "migrator" or record.tool not in SOURCE_READ_TOOLS:
            continue
        named = str(record.arguments.get("path" if record.tool == "read_file" else "command", ""))
        if named == mount or f"{mount}/" in named or named.endswith(f" {mount}"):
            per_round[record.round] += 1
    rounds = ", ".join(f"round {r}: {n}" for r, n in sorted(per_round.items()))
    total = f"{sum(per_round.values())}" + (f" ({rounds})" if rounds else "")
    return f"{total}, each a read_file or a command naming {mount}"


def _zero_reasons(run: RunDir, grades: RunGrades | None) -> list[str]:
    """Summary lines saying why each reward is 0 or missing, with the grader's last output lines (fenced)."""
    unexplained = [g for g in (grades.rounds if grades else []) if g.why and g.same_as is None]
    if not unexplained:
        return []
    lines = ["", "## Why a reward is 0 or missing", ""]
    for g in unexplained:
        lines.append(f"- round {g.round}: {_one_line(g.why)}" + (f" (grader output: `{g.output}`)" if g.output else ""))
        tail = _output_tail(run, g.output, SUMMARY_OUTPUT_LINES)
        if tail:
            fence = "`" * max(3, _longest_backtick_run(tail) + 1)
            lines += ["", f"{fence}text", tail, fence, ""]
    return lines


def _output_tail(run: RunDir, output: str | None, lines: int) -> str:
    """The last `lines` non-empty lines of a kept grader output ("" when none is left)."""
    if output is None:
        return ""
    try:
        text = read_regular_text(run.root / output, 1 << 20)
    except (AgentFileError, OSError):
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _one_line(text: str) -> str:
    return " ".join(text.split())


FINAL_DIR = "final"
"""The final candidate's snapshot inside a run directory."""

REAL_MODEL_HINT = (
    "with a real model: twin migrate --task {task} --model anthropic/claude-sonnet-4-5 --rounds {rounds} "
    "(set ANTHROPIC_API_KEY; any litellm model works, see docs/models.md)"
)


def export_final(session: Any) -> Path | None:
    """Write the final round's snapshot to `<run>/final/` (replacing an older one); None if none."""
    final_round = session.state.final_round
    if final_round is None or final_round not in session.repo.rounds():
        return None
    import tarfile

    dest = session.run.root / FINAL_DIR
    discard_tree(dest)
    try:
        return session.repo.export(final_round, dest)
    except (TwinError, tarfile.ReadError):  # an empty tree archives to nothing tar can read
        discard_tree(dest)
        return None


def closing_lines(run: RunDir, config: RunConfig, state: RunState) -> list[str]:
    """What a user wants to see when a run ends: every round's grade, the final candidate, the
    run directory, for a replayed or scripted run how to run with a real model, and last what
    the run spent (`figures.spent_line`, the text of summary.md's `spent` line)."""
    lines = []
    if run.grades.exists():
        grades = RunGrades.model_validate_json(run.grades.read_text())
        lines.append("grades (the task's own grader, after the run):")
        for g in grades.rounds:
            grade = numbers.reward(g.reward) if g.reward is not None else "not graded"
            same = f" (same tree as round {g.same_as})" if g.same_as else ""
            why = f" — {_one_line(g.why)[:300]}" if g.why and not g.same_as else ""
            where = f" (grader output: {run.root / g.output})" if why and g.output else ""
            lines.append(f"  round {g.round}: {grade}{same}{why}{where}")
        if any(g.reward is None for g in grades.rounds):
            lines.append(f"grade the rounds left ungraded again with: twin migrate --resume {run.root}")
        if grades.snapshots:
            best = max((g.reward for g in grades.snapshots if g.reward is not None), default=None)
            lines.append(
                f"snapshots: {len(grades.snapshots)} graded"
                + (f", best reward {numbers.reward(best)}" if best is not None else "")
                + " (the reward over what was spent: summary.md)"
            )
    else:
        lines.append("not graded (--no-grade)")
    final = run.root / FINAL_DIR
    where = f"{final}" if final.is_dir() else "not exported"
    lines.append(f"final candidate: round {state.final_round} — {where}")
    lines.append(f"run directory: {run.root} ({', '.join(run_files(run))})")
    if not config.model.kind.live:
        lines.append(REAL_MODEL_HINT.format(task=config.task, rounds=config.rounds))
    lines.append(f"spent: {spent_line(state)}")
    return lines


def run_files(run: RunDir) -> list[str]:
    """The run's main files that it has (a base-scaffold run has no evidence, audit log or probes)."""
    paths = [run.summary, run.trajectory, run.evidence, run.grades, run.root / GRADING_DIR, run.audit_log, run.probes]
    return [p.name + ("/" if p.is_dir() else "") for p in paths if p.exists()]


def evidence_tallies(run: RunDir, rounds: Iterable[int] = ()) -> dict[int, Counter]:
    """Per round, the state after it: properties by latest outcome (`views.round_tally`, as every view counts).

    Every round that holds evidence, and each of `rounds` after the first that does: a round
    that recorded none (its tree unchanged, so not verified again) carries the state before it.
    """
    if not run.evidence.exists():
        return {}
    store = EvidenceStore(run.evidence, create=False)
    try:
        held = store.evidence_rounds()
        counted = sorted({*held, *(r for r in rounds if held and r > min(held))})
        return {round: round_tally(store, round, candidate_only=True) for round in counted}
    finally:
        store.close()
