"""`twin probe`: run differential probes and candidate-side checks on a candidate.

Its exit status gates CI as pytest's does: 0 every property established, 1 any
violated, 2 a usage or task error, 3 infrastructure (no sandbox, a sandbox that
could not start). A run with properties not established and none violated exits 0.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from evidence_store import reading
from ground.errors import InfraFailure, TwinError
from ground.isolation import IsolationError
from ground.sandbox import SandboxError
from ground.terminal import agent_console, styled
from harness.cli import options
from probes.context import SANDBOX_KINDS
from probes.localize import localize_divergence
from probes.services.families import is_service, probe_families
from probes.services.probe_file import SearchBudget
from probes.suite import builtin_checks, load_probe_file, run_suite, task_probes

_STYLE = {"established": "green", "violated": "bold red", "not_established": "yellow"}
EXIT_VIOLATED = 1


def probe_command(
    task: options.TaskDir,
    candidate: Path = typer.Option(None, "--candidate", help="Candidate directory to examine."),
    probe: list[Path] = typer.Option(
        None, "--probe", help="Probe file to run (repeatable); see probes/README.md."
    ),
    own_probes: bool = typer.Option(
        True,
        "--task-probes/--no-task-probes",
        "--library/--no-library",
        help="Run the task's own probes: the probe files its task.toml lists (probe_files) and, for a web app "
        "whose files state no requests, a search of its routes. --library is an older name.",
    ),
    init: Path = typer.Option(
        None, "--init", help="Write a probe-file skeleton from the task's original to this new file, and stop."
    ),
    init_module: list[str] = typer.Option(
        None, "--module", help="With --init: probes for this module's components only (repeatable)."
    ),
    init_class: list[str] = typer.Option(
        None, "--class", help="With --init --module: probes for this class only (repeatable)."
    ),
    builtin: bool = typer.Option(
        True, "--builtin/--no-builtin", help="Run the built-in candidate-side checks."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the results as JSON (one object) instead of a table."
    ),
    families: bool = typer.Option(
        False, "--families", help="List the service probe families that apply (a service task's always are)."
    ),
    sandbox: str = typer.Option("auto", "--sandbox", help="bwrap, none or auto."),
    device: str = typer.Option("cpu", "--device", help="cpu or gpu (both sides)."),
    precision: str = typer.Option(
        "highest", "--precision", help="highest, default or bf16 (both sides)."
    ),
    jobs: int = typer.Option(1, "--jobs", help="Probes run at once."),
    search_examples: int = typer.Option(
        100, "--search-examples", help="Counterexample search: inputs generated per request space."
    ),
    search_seconds: float = typer.Option(
        60.0, "--search-seconds", help="Counterexample search: seconds per request space (shrinking included)."
    ),
    search_seed: int = typer.Option(0, "--search-seed", help="Counterexample search: seed of the drawn inputs."),
    workdir: Path = typer.Option(
        None, "--workdir", help="Keep probe files, inputs and outputs here."
    ),
    keep: bool = typer.Option(
        False, "--keep", help="Keep the probe work directory (under twin's cache dir) and print where it is."
    ),
    audit_log: options.AuditLog = None,
    settings: options.PublishedSettings = None,
    original_dir: options.OriginalDir = None,
    assets_dir: options.AssetsDir = None,
    output_dir: options.OutputDir = None,
) -> None:
    """Probe a candidate against the task's original and print what is established.

    Exit status: 0 all established, 1 any violated, 2 usage or task error, 3 infrastructure.
    """
    if (init_module or init_class) and init is None:
        raise TwinError("--module and --class aim --init FILE: give --init too")
    if init_class and not init_module:
        raise TwinError("--class needs --module (the module that defines it)")
    if init is not None:
        _write_skeleton(init, task, lambda: options.load_task_option(
            task, "none", settings, original_dir, assets_dir, output_dir),
            list(init_module or []), list(init_class or []))  # fmt: skip
        return
    if candidate is None:
        raise TwinError("--candidate DIR is required (or --init FILE to write a probe-file skeleton)")
    if sandbox not in SANDBOX_KINDS:
        raise TwinError(f"--sandbox must be one of {', '.join(SANDBOX_KINDS)}, not {sandbox!r}")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        raise InfraFailure("bubblewrap (bwrap) is not installed: install it, or use --sandbox none")
    if jobs < 1:
        raise TwinError("--jobs must be at least 1")
    if search_examples < 1 or search_seconds <= 0:
        raise TwinError("--search-examples must be at least 1 and --search-seconds positive")
    budget = SearchBudget(max_examples=search_examples, seconds=search_seconds, seed=search_seed)
    probe_files = list(probe or [])
    for path in probe_files:
        if not path.expanduser().is_file():
            raise TwinError(f"probe file not found: {path}")
    try:
        loaded = options.load_task_option(task, sandbox, settings, original_dir, assets_dir, output_dir)
    except (SandboxError, IsolationError) as exc:
        raise InfraFailure(str(exc)) from None
    probes = builtin_checks(loaded) if builtin else []
    try:
        if own_probes:
            probes += task_probes(loaded, budget)
        for path in probe_files:
            probes += load_probe_file(path, budget)
    except ValueError as exc:
        raise TwinError(str(exc)) from None
    if not probes:
        raise TwinError(f"nothing to run: no --probe given and task {loaded.name} lists no probe files (probe_files)")
    console = agent_console(stderr=as_json)
    context_options = {
        "sandbox_kind": sandbox,
        "device": device,
        "precision": precision,
        "workdir": kept_workdir(isolated=sandbox != "none") if keep and workdir is None else workdir,
        "audit_log": audit_log,
        "keep": keep,
    }
    try:
        violated = _run(console, loaded, candidate, probes, jobs, as_json, context_options, families)
    except (SandboxError, IsolationError) as exc:
        raise InfraFailure(str(exc)) from None
    if violated:
        raise typer.Exit(EXIT_VIOLATED)


def _run(console, loaded, candidate: Path, probes, jobs: int, as_json: bool, context_options, families) -> bool:
    """Run the suite and report it; whether any property is violated."""
    shown = candidate.expanduser().resolve()
    with ExitStack() as stack:
        with console.status(f"probing {shown} ({len(probes)} probes)") as status:

            def progress(done: int, total: int, _results) -> None:
                status.update(styled(f"probing {shown}: {done}/{total}"))

            suite = stack.enter_context(
                run_suite(loaded, candidate, probes, jobs=jobs, progress=progress, **context_options)
            )
        return _report(console, suite.ctx, suite.results, as_json=as_json, families=families)


def kept_workdir(*, isolated: bool) -> Path:
    """A new directory for a kept probe run: under twin's cache (`$TWIN_CACHE_DIR`, machine-wide
    `/var/cache/twin` as root), or under the stage root where the sandbox uid (`isolated`) cannot
    reach the cache."""
    from ground.isolation import cache_root, reachable, scratch_dir

    runs = cache_root() / "probe-runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        runs.chmod(0o711)
    except OSError:
        return scratch_dir("twin-probe-")
    if isolated and not reachable(runs):
        return scratch_dir("twin-probe-")
    path = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs))
    path.chmod(0o711)
    return path


def _write_skeleton(path: Path, task_dir: Path, load, modules: list[str], classes: list[str]) -> None:
    """`--init`: a probe-file skeleton of the original, written to a new file.

    `--task` names a task, or (before there is one: `twin task new` needs a probe file) the
    original repository itself, any directory without a task.toml. `modules` (and `classes`)
    aim it: only their components, most depended on first (`probes.skeleton_focus`).
    """
    from probes.skeleton import probe_skeleton
    from probes.skeleton_focus import FocusError, focused_components

    task_dir = task_dir.expanduser()
    if task_dir.is_dir() and not (task_dir / "task.toml").exists():
        source, mount = task_dir, "/source"
    else:
        loaded = load()
        source, mount = loaded.source_dir, loaded.settings.source_mount
    path = path.expanduser()
    if path.exists():
        raise TwinError(f"{path} exists; --init writes a new file")
    if not path.parent.is_dir():
        raise TwinError(f"directory of {path} does not exist")
    try:
        components = focused_components(source, modules, classes) if modules else None
    except FocusError as exc:
        raise TwinError(str(exc)) from None
    path.write_text(probe_skeleton(source, mount, components))
    agent_console().print(
        f"wrote {path}: fill in each probe (probes/README.md), then twin probe --probe {path}", soft_wrap=True
    )


def _report(console: Console, ctx, results: list, *, as_json: bool, families: bool = False) -> bool:
    """The results with the divergence they localize, as JSON or as a table (the context still open).

    Under the table, the service probe families are listed for a service task, or when asked
    (`families`); JSON always carries them.
    """

    found = localize_divergence(ctx, results)
    if found is not None:
        results = [*results, found]
    if as_json:
        print(
            json.dumps(
                {
                    "task": ctx.task.name,
                    "candidate": str(ctx.candidate),
                    "workdir": str(ctx.workdir),
                    "probe_families": probe_families(ctx.task),
                    "results": [r.model_dump(mode="json") for r in results],
                },
                indent=2,
            )
        )
        return _any_violated(results)
    _print_table(console, ctx, results)
    applying = probe_families(ctx.task)
    if applying and (families or is_service(ctx.task, applying)):
        console.print(
            "service probe families: " + "; ".join(f"{k} ({why})" for k, why in applying.items()),
            markup=False,
            soft_wrap=True,
        )
        for family, ran in _service_runs(applying, results).items():
            line = f"  {family}: {ran} propert{'y' if ran == 1 else 'ies'} examined"
            if not ran:
                line = (
                    f"  {family}: nothing run: no request or request space stated for it"
                    " (a probe file's SERVICES, probes/README.md)"
                )
            console.print(line, markup=False, soft_wrap=True)
    return _any_violated(results)


def _any_violated(results) -> bool:
    return any(r.outcome.value == "violated" for r in results)


def _service_runs(families: dict[str, str], results) -> dict[str, int]:
    """How many service properties each family's probes produced (`http:…`, `search:http:…`, …)."""
    kinds = {family: "python_api" if family == "python" else family for family in families}
    ids = [r.property.id for r in results]
    return {
        family: sum(i.split(":")[0] == kind or i.split(":")[1:2] == [kind] for i in ids)
        for family, kind in kinds.items()
    }


def _deciding(result) -> str:
    """What decided a result: failing outputs as distance against tolerance, else why."""
    failing, passing, total = reading.failing_lines(result)
    if failing:
        shown = failing[: reading.FAILING_SHOWN]
        more = [f"… {total - len(shown)} more failing"] if total > len(shown) else []
        passes = [f"{passing} other output{'s' if passing != 1 else ''} pass"] if passing else []
        marked = [reading.reimplementation_line(result)] if result.reimplemented else []
        return "\n".join(shown + more + passes + marked)
    if result.outcome.value != "established":
        return "\n".join(line for line in (reading.reason(result), reading.reimplementation_line(result)) if line)
    passes = f"all {passing} outputs pass" if passing > 1 else ""
    return "\n".join(line for line in (passes, reading.reimplementation_line(result)) if line)


def _print_table(console: Console, ctx, results) -> None:
    """A table on a terminal; plain lines, one property after another, anywhere else.

    Piped output is never wrapped or cut: a property id or a detail stays whole on its line.
    """
    counts = {k: sum(r.outcome.value == k for r in results) for k in _STYLE}
    title = f"{ctx.task.name}: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    if not console.is_terminal:
        plain = {"highlight": False, "markup": False, "soft_wrap": True}
        console.print(title, **plain)
        for r in results:
            console.print(f"{reading.outcome_text(r):15} {r.property.id} (L{r.property.level})", **plain)
            for line in _deciding(r).splitlines():
                console.print(f"    {line}", **plain)
        if ctx.keep:
            console.print(f"probe files and outputs: {ctx.workdir}", **plain)
        return
    table = Table(title=title)
    table.add_column("property", overflow="fold")
    table.add_column("level", justify="right")
    table.add_column("outcome", no_wrap=True)
    table.add_column("what decided it", overflow="fold")
    for r in results:
        outcome = styled(reading.outcome_text(r), _STYLE[r.outcome.value])
        table.add_row(r.property.id, str(r.property.level), outcome, _deciding(r))
    console.print(table)
    if ctx.keep:
        console.print(f"probe files and outputs: {ctx.workdir}", markup=False, highlight=False, soft_wrap=True)
