"""`twin evidence …`: show, diff, export, import and re-run the evidence of a run.

RUN is a run directory, or a run id under `./runs/`. Every bad input (no such run,
no store, a round or kind the run does not have) is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from evidence_store import numbers, reading
from evidence_store.records import EvidenceRecord, Outcome
from evidence_store.schema import EvidenceStoreError
from evidence_store.store import EvidenceStore
from evidence_store.views import CATEGORY_ORDER, NON_CANDIDATE_KINDS, candidate_latest, tally, tally_text
from ground.terminal import agent_console, styled
from harness.run.directory import RunDir
from probes.rerun import rerun_record
from probes.round_localization import render_localization

app = typer.Typer(no_args_is_help=True)

_STYLE = {
    Outcome.ESTABLISHED: "green",
    Outcome.VIOLATED: "bold red",
    Outcome.NOT_ESTABLISHED: "yellow",
}


def _open(run: str) -> EvidenceStore:
    return EvidenceStore.open_run(run, create=False)


def _check_round(store: EvidenceStore, round: int) -> None:
    known = sorted(set(store.evidence_rounds()) | {r.round for r in store.rounds()})
    if round not in known:
        listed = ", ".join(map(str, known)) or "none"
        raise EvidenceStoreError(f"{store.path} has no round {round} (rounds: {listed})")


def _outcome(record: EvidenceRecord | None, *, plain: bool = False) -> str | Text:
    if record is None:
        return "-" if plain else styled("-", "dim")
    outcome = Outcome(record.outcome)
    text = reading.outcome_text(record)  # `established (against a re-implementation)` where it was
    return text if plain else styled(text, _STYLE[outcome])


def _score(record: EvidenceRecord | None) -> str:
    if record is None or record.score is None:
        return ""
    return numbers.short_of_one(numbers.score(record.score), record.score)


def _state(record: EvidenceRecord | None, *, plain: bool = False) -> str | Text:
    score = _score(record)
    return _outcome(record, plain=plain) + (f" {score}" if score else "")


def _detail_lines(record: EvidenceRecord) -> list[str]:
    """The deciding numbers of a record that did not hold (distance against tolerance), else why."""
    if record.outcome is not Outcome.ESTABLISHED:
        failing, _, total = reading.failing_lines(record)
        if failing:
            shown = failing[:reading.FAILING_SHOWN]
            more = [f"(+{total - len(shown)} more failing outputs)"] if total > len(shown) else []
            return shown + more + [reading.reimplementation_line(record)]
        return [reading.reason(record) or record.property.description, reading.reimplementation_line(record)]
    return [record.property.description, reading.reimplementation_line(record)]


def _detail(record: EvidenceRecord) -> str:
    return "; ".join(line for line in _detail_lines(record) if line)


_SHOWN_APART = frozenset({"localization", "unchecked", "report"})  # printed above and per round

_PLAIN = {"highlight": False, "markup": False, "soft_wrap": True}


def _print_records(console: Console, title: str, records: list[EvidenceRecord]) -> None:
    """A table on a terminal; whole plain lines, one record after another, anywhere else."""
    if console.is_terminal:
        console.print(_records_table(title, records))
        return
    console.print(f"{title}:", **_PLAIN)
    for r in records:
        score = _score(r)
        head = f"{_outcome(r, plain=True):15} {r.property.id} ({r.property.kind}, L{r.property.level})"
        console.print(f"{head} round {r.round} record {r.record_id}" + (f" score {score}" if score else ""), **_PLAIN)
        for line in _detail_lines(r):
            if line:
                console.print(f"    {' '.join(line.split())}", **_PLAIN)


def _records_table(title: str, records: list[EvidenceRecord]) -> Table:
    table = Table(title=title, title_justify="left")
    longest_id = max((len(r.property.id) for r in records), default=8)
    for name in ("id", "round", "property", "kind", "L", "outcome", "score", "detail"):
        wraps = name in ("property", "detail")
        table.add_column(
            name,
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=min(longest_id, 40) if name == "property" else None,
            justify="right" if name in ("id", "round", "L", "score") else "left",
        )
    for r in records:
        table.add_row(
            str(r.record_id),
            str(r.round),
            r.property.id,
            r.property.kind,
            str(r.property.level),
            _outcome(r),
            _score(r),
            _detail(r),
        )
    return table


@app.command("show")
def show_command(
    run: str = typer.Argument(..., help="Run directory, or run id under ./runs/."),
    round: int | None = typer.Option(None, "--round", help="The state after this round."),
    kind: str | None = typer.Option(None, "--kind", help="Only properties of this kind."),
    every: bool = typer.Option(False, "--records", help="Every record, not the latest state."),
) -> None:
    """Show the latest outcome of every property (or every record), with counts."""
    console = agent_console()
    with _open(run) as store:
        if round is not None:
            _check_round(store, round)
        if store.count() == 0:
            console.print(f"{store.path}: no evidence recorded yet")
            return
        latest = store.latest(up_to_round=round)
        if kind is not None and all(r.property.kind != kind for r in latest.values()):
            kinds = ", ".join(sorted({r.property.kind for r in latest.values()}))
            raise EvidenceStoreError(
                f"{store.path} has no evidence of kind {kind!r} (kinds: {kinds})"
            )
        about_run: list[EvidenceRecord] = []
        if every:
            records = store.records(round=round, kind=kind)
            title = f"records of round {round}" if round is not None else "all records"
        else:
            chosen = {pid: r for pid, r in latest.items() if kind is None or r.property.kind == kind}
            records = list(candidate_latest(chosen).values())
            title = "latest outcome per property" + (
                f" after round {round}" if round is not None else ""
            )
            about_run = [
                r for r in chosen.values() if r.property.kind in NON_CANDIDATE_KINDS - _SHOWN_APART
            ]
        located = [r for r in store.records(property_id="localization") if round is None or r.round <= round]
        if located:
            console.print(render_localization(located[-1]).rstrip(), **_PLAIN)
        _print_records(console, title, records)
        if not every and about_run:
            _print_records(console, "about the run, not counted among the candidate's properties", about_run)
        _print_rounds(console, store, round)
        counts = tally(latest)
        total = sum(counts.values())
        console.print(f"{total} properties (latest outcome of each): {tally_text(counts)}", soft_wrap=True)
        _print_curve(console, store.path.parent)


def _print_curve(console: Console, run_dir: Path) -> None:
    """The run's reward over what it spent, from its graded snapshots (`--grade-snapshots`), if it has them;
    and, if the history's cap stopped the snapshots, that line."""
    from harness.run.directory import RunState
    from harness.run.finish import RunGrades

    try:
        stopped = RunState.model_validate_json((run_dir / "state.json").read_text()).snapshots_stopped
    except (OSError, ValueError):
        stopped = None
    if stopped is not None:
        console.print(stopped.line(), markup=False, highlight=False, soft_wrap=True)
    try:
        grades = RunGrades.model_validate_json((run_dir / "grades.json").read_text())
    except (OSError, ValueError):
        return
    if not grades.snapshots:
        return
    table = Table(title="reward over what was spent (graded snapshots)", title_justify="left")
    for name in ("snapshot", "kind", "round", "calls", "tokens", "dollars", "wall s", "reward"):
        table.add_column(name, justify="left" if name == "kind" else "right")
    for g in grades.snapshots:
        s = g.snapshot
        reward = "not graded" if g.reward is None else f"{g.reward:.4f}"
        table.add_row(
            str(s.index), s.kind, str(s.round), str(s.calls), f"{s.tokens:,}", f"{s.usd:.4f}", f"{s.wall_s:.1f}", reward
        )
    console.print(table)


def _print_rounds(console: Console, store: EvidenceStore, up_to: int | None) -> None:
    """Per round: the candidate commit, the Migrator's summary and what the Verifier left unchecked."""
    for info in store.rounds():
        if up_to is not None and info.round > up_to:
            continue
        unchecked = store.records(round=info.round, kind="unchecked")
        reports = store.records(round=info.round, kind="report")
        if not (info.candidate_commit or info.note or unchecked or reports):
            continue
        commit = (info.candidate_commit or "-")[:10]
        console.print(f"round {info.round}: candidate commit {commit}", **_PLAIN)
        if info.note:
            console.print(f"  Migrator's summary: {' '.join(info.note.split())}", **_PLAIN)
        for record in reports:
            summary = " ".join(str(record.observations.get("summary", "")).split())
            console.print(f"  Verifier's summary: {summary}", **_PLAIN)
        for record in unchecked:
            name = record.property.id.removeprefix("unchecked:")
            why = record.observations.get("reason", "")
            console.print(f"  not examined by the Verifier: {name}: {why}", **_PLAIN)


@app.command("diff")
def diff_command(
    run: str = typer.Argument(..., help="Run directory, or run id under ./runs/."),
    a: int = typer.Argument(..., help="Earlier round."),
    b: int = typer.Argument(..., help="Later round."),
    every: bool = typer.Option(False, "--all", help="Also list properties established in both."),
) -> None:
    """Compare the state after round A with the state after round B: regressions first."""
    console = agent_console()
    with _open(run) as store:
        _check_round(store, a)
        _check_round(store, b)
        change = store.transitions(a, b)
    table = Table(title=f"round {a} -> round {b}", title_justify="left")
    table.add_column("change", no_wrap=True)
    table.add_column("property", overflow="fold", min_width=12)
    table.add_column(f"after round {a}", no_wrap=True)
    table.add_column(f"after round {b}", no_wrap=True)
    rows = [
        (category.replace("_", " "), c)
        for category in CATEGORY_ORDER
        if every or category != "still_established"
        for c in getattr(change, category)
    ]
    for name, c in rows:
        if console.is_terminal:
            table.add_row(name, c.property_id, _state(c.before), _state(c.after))
        else:
            before, after = _state(c.before, plain=True), _state(c.after, plain=True)
            console.print(f"{name:22} {c.property_id}: {before} -> {after}", **_PLAIN)
    if rows and console.is_terminal:
        console.print(table)
    counts = ", ".join(f"{len(v)} {k.replace('_', ' ')}" for k, v in change.categories().items())
    console.print(counts or "no evidence in either round")


@app.command("export")
def export_command(
    run: str = typer.Argument(..., help="Run directory, or run id under ./runs/."),
    output_file: str | None = typer.Option(
        None, "--output", "-o", help="File to write (default stdout)."
    ),
) -> None:
    """Export rounds, diagnoses and evidence records as JSON Lines."""
    with _open(run) as store:
        if output_file is None:
            store.export_jsonl(sys.stdout)
            return
        output = Path(output_file)
        if not output.parent.is_dir():
            raise EvidenceStoreError(f"cannot write {output}: {output.parent} is not a directory")
        # Written beside the target and renamed, so a failed export leaves no half file.
        fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                written = store.export_jsonl(out)
            os.replace(tmp, output)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    agent_console(stderr=True).print(f"wrote {written} records to {output}")


@app.command("import")
def import_command(
    run: str = typer.Argument(..., help="Run directory, or run id under ./runs/."),
    source_file: str = typer.Argument(..., help="JSON Lines written by `twin evidence export`."),
) -> None:
    """Append an exported file's rounds, diagnoses and records (all or nothing)."""
    source = Path(source_file)
    if not source.is_file():
        raise EvidenceStoreError(f"no such file: {source}")
    with EvidenceStore.open_run(run, create=True) as store, source.open() as src:
        added = store.import_jsonl(src)
    agent_console().print(f"imported {added} records into {store.path}")


@app.command("rerun")
def rerun_command(
    run: str = typer.Argument(..., help="Run directory, or run id under ./runs/."),
    record: int = typer.Argument(..., help="Record id to re-execute."),
    round: int | None = typer.Option(None, "--round", help="File the result under this round."),
    task: str | None = typer.Option(
        None, "--task", help="Task directory (default: the record's, else the run's)."
    ),
    candidate: str | None = typer.Option(
        None, "--candidate", help="Candidate to examine (default: the record's, else the run's)."
    ),
) -> None:
    """Re-execute a record from what it kept and append the new result."""
    if round is not None and round < 0:
        raise EvidenceStoreError(f"round must be non-negative, not {round}")
    with _open(run) as store:
        original = store.get(record)
        spec = original.context.get("rerun")
        named = spec if isinstance(spec, dict) else {}
        run_task, run_candidate = _run_defaults(store.path.parent)
        new = rerun_record(
            store,
            record,
            round=round,
            task=task or (None if named.get("task") else run_task),
            candidate=candidate or (None if named.get("candidate") else run_candidate),
        )
    agent_console().print(_records_table(f"record {record} re-run", [original, new]))


def _run_defaults(run_dir: Path) -> tuple[str | None, str | None]:
    """The task and candidate of a run directory, where it records them."""
    layout = RunDir(run_dir)
    task = None
    if layout.config_path.is_file():
        try:
            task = json.loads(layout.config_path.read_text()).get("task")
        except (OSError, ValueError, AttributeError):
            task = None
    candidate = str(layout.candidate.resolve()) if layout.candidate.is_dir() else None
    return task, candidate
