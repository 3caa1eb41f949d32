"""Assembling and running probes: built-in checks, a task's own probe files, given probe files.

- `builtin_checks(task)`: candidate-side checks every task gets (imports,
  independence, the static audit) and those its declared interface allows.
- `task_probes(task)`: the task's own probes: the probe files its `task.toml` lists
  (`probe_files`, inside the task's folder), the same for a bundled task as for a user's,
  and for a web app whose files state no requests, a search of its routes. A task is
  known by its folder and its declaration, never by its name.
- `load_probe_file(path)`: the probes of one probe file (format: `probes/README.md`),
  read and parsed once (`file_probes` of the parsed file): every probe runs that text.
- `run_probes(ctx, probes)`: run them; a probe that raises becomes a
  not_established result with its trace, never an exception.
- `run_suite(task, candidate, probes, ...)`: the one way to run a suite on a
  candidate: builds the probe context, runs the probes, and closes the context and
  removes its work directory when the block ends, whatever ended it.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from evidence_store.records import ProbeResult, Property
from probes.base import Probe, not_established
from probes.checks import audit_check, checks_probe, imports_check
from probes.context import ProbeContext, make_context
from probes.differential import pairs_probe
from probes.interface_checks import declared_checks, interface_check
from probes.probe_format import ProbeFile, ProbeFileError, read_probe_file
from probes.services.families import inferred_services
from probes.services.probe_file import SearchBudget, read_services, service_probes
from task_model.model import Task

_PEOPLE_ONLY = re.compile(r"<!-- people -->\n.*?<!-- /people -->\n", re.S)


def _probe_file_format() -> str:
    readme = Path(__file__).with_name("README.md")
    return _PEOPLE_ONLY.sub("", readme.read_text()) if readme.is_file() else ""


PROBE_FILE_FORMAT = _probe_file_format()
"""The probe-file format, as taught to whoever writes probes (the Verifier role): the
README without its parts for people at a shell (between `<!-- people -->` markers)."""

Progress = Callable[[int, int, list[ProbeResult]], None]


def _named(probe: Probe, name: str) -> Probe:
    probe.__name__ = name  # type: ignore[attr-defined]
    probe.__qualname__ = name  # type: ignore[attr-defined]
    return probe


def builtin_checks(task: Task) -> list[Probe]:
    """Candidate-side checks and the static audit, for any task; and those its declared interface allows.

    `probes.interface_checks.check_plan(task)` says which of the interface's checks run.
    """
    checks = [_named(imports_check(), "imports"), _named(audit_check(), "audit")]
    if declared_checks(task):
        checks.append(_named(interface_check(), "interface"))
    return checks


def task_probe_files(task: Task) -> list[Path]:
    """The probe files a task lists (`probe_files` of `[metadata.twin]`), in its folder, each present.

    Raises:
        ProbeFileError: a listed file is missing (one line naming it and where it is listed).
    """
    files = [task.root / name for name in task.settings.probe_files]
    for path in files:
        if not path.is_file():
            raise ProbeFileError(f"task {task.name}: probe file {path} (probe_files in task.toml) not found")
    return files


def task_probes(task: Task, budget=None) -> list[Probe]:
    """The task's own probes: its listed probe files; for a web app whose files state no requests, a route search.

    Args:
        budget: a `probes.services.probe_file.SearchBudget` for its counterexample searches.

    Raises:
        ProbeFileError: a listed file is missing or not a probe file.
    """
    files = [read_probe_file(path) for path in task_probe_files(task)]
    probes = [probe for file in files for probe in file_probes(file, budget)]
    if not any(read_services(file) for file in files):
        # Without stated requests, a web app's own routes are searched (probes.services.families).
        spec = inferred_services(task)
        if spec is not None:
            found = service_probes(Path("inferred-routes"), spec, budget or SearchBudget())
            probes += [_named(probe, "inferred:services") for probe in found]
    return probes


def load_probe_file(path: Path | str, budget=None) -> list[Probe]:
    """The differential probes, candidate checks and service probes one probe file defines.

    Args:
        budget: a `probes.services.probe_file.SearchBudget` for the counterexample searches its
            `SERVICES` states (default: `SearchBudget()`).

    Raises:
        ProbeFileError: the file is missing or not a probe file (see `probes/README.md`).
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ProbeFileError(f"probe file not found: {path}")
    return file_probes(read_probe_file(path), budget)


def file_probes(file: ProbeFile, budget=None) -> list[Probe]:
    """The probes of a probe file read once: the parsed file is what every probe runs.

    Raises:
        ProbeFileError: the file is not a probe file (see `probes/README.md`).
    """
    services = read_services(file)
    try:
        pairs = file.names()
        checks = file.names(checks=True)
    except ProbeFileError as exc:
        if services is None or "defines no probe" not in str(exc):
            raise
        pairs, checks = {}, {}  # a file may state services only
    stem = file.path.stem
    probes = [_named(pairs_probe(file, pairs), stem)] if pairs else []
    if checks:
        probes.append(_named(checks_probe(file, checks), f"{stem}:checks"))
    if services is not None:
        found = service_probes(file.path, services, budget or SearchBudget())
        probes += [_named(p, f"{stem}:services") for p in found]
    return probes


def _run_one(ctx: ProbeContext, probe: Probe) -> list[ProbeResult]:
    start = time.perf_counter()
    try:
        results = list(probe(ctx))
    except Exception as exc:  # a probe's own failure is data, never the candidate's fault
        name = getattr(probe, "__name__", "probe")
        prop = Property(id=f"probe:{name}", kind="differential", level=1)
        results = [
            not_established(
                prop,
                f"the probe failed: {type(exc).__name__}: {exc}",
                trace=traceback.format_exc()[-8000:],
            )
        ]
    elapsed = time.perf_counter() - start
    for result in results:
        result.observations.setdefault("timing", {})["probe_wall_s"] = elapsed
    return results


def run_probes(
    ctx: ProbeContext, probes: list[Probe], *, jobs: int = 1, progress: Progress | None = None
) -> list[ProbeResult]:
    """Run every probe on `ctx`; results in the order of `probes`.

    Args:
        ctx: the candidate and how both sides run.
        probes: probes from the factories, `builtin_checks`, `task_probes`, `load_probe_file`.
        jobs: probes run at once (each side of each probe is its own process).
        progress: called as progress(done, total, results_of_that_probe).
    """
    total = len(probes)
    if jobs <= 1:
        out: list[ProbeResult] = []
        for i, probe in enumerate(probes, start=1):
            results = _run_one(ctx, probe)
            if progress is not None:
                progress(i, total, results)
            out.extend(results)
        return out
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(_run_one, ctx, probe) for probe in probes]
        collected = []
        for i, future in enumerate(futures, start=1):
            results = future.result()
            if progress is not None:
                progress(i, total, results)
            collected.extend(results)
        return collected
    finally:
        # Interrupted: probes not yet started never start; running ones finish before the
        # caller removes the work directory they write into.
        pool.shutdown(wait=True, cancel_futures=True)


class SuiteRun(NamedTuple):
    """A suite that ran: its context (open until the `run_suite` block ends) and its results."""

    ctx: ProbeContext
    results: list[ProbeResult]


@contextmanager
def run_suite(
    task: Task,
    candidate: Path | str,
    probes: list[Probe],
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    **options,
) -> Iterator[SuiteRun]:
    """Run `probes` on `candidate` in a fresh probe context, for the duration of a `with` block.

    The context stays open inside the block (to localize a divergence from it, or to show
    where its files are); when the block ends, by any exception or KeyboardInterrupt too,
    both sides' sandboxes are closed and the work directory twin made is removed (one the
    caller named, or asked to keep, stays).

    Args:
        task: the loaded task (`task_model.loader`).
        candidate: the candidate work tree (host path).
        probes: what to run (`builtin_checks`, `task_probes`, `load_probe_file`, factories).
        jobs: probes run at once.
        progress: called as progress(done, total, results_of_that_probe).
        **options: options of `probes.context.make_context` (sandbox_kind, device, precision,
            workdir, keep, audit_log, candidate_commit, seed, timeout_s, reference_cache).

    Raises:
        ProbeOptionError: an option or the candidate directory is not usable.
    """
    ctx = make_context(task, candidate, **options)
    try:
        yield SuiteRun(ctx, run_probes(ctx, probes, jobs=jobs, progress=progress))
    finally:
        ctx.close()
