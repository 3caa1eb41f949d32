"""Whether a task's frozen references are still what its original computes.

A grader's references are recorded once, from the original. If the recorder drifts from
the original (the original or its environment changed since, or the recording was edited
or mis-made), every grade compares against numbers the original no longer gives. So the
check re-runs a sample of the reference side on the original, in the current environment,
from the frozen inputs, and compares each frozen output with what the original gives now.

A bundled task whose recorder can say so names it (`reference_check` in `[metadata.twin]`):
the recorder, given `--check`, records every reference again in memory and prints a line per
quantity that drifted (`check_recorder`). A task made by `twin task new` says how too:
`tests/spec.json` lists its probes, and each probe's `tests/refs/<slot>/` holds its inputs,
its output at the working dtype (`ref/`) and its noise run (`noise/`, float64 or a second run).
The sample's reference side runs exactly as recording ran it
(`benchmark_adapter.grading.references`), both runs again.

Tolerance: the re-run's own noise. Two runs of the same program at the working dtype each
lie within the noise `d(ref, ref_f64)` of the float64 run, so they differ by at most twice
that (`DRIFT_SPREAD`, over `compare.RESOLUTION`, one float32 step, as its floor): no room is
given for an implementation of its own, unlike a candidate's `compare.SPREAD`. Discrete and
banded outputs are decided as `probes.compare` decides them. The frozen noise run is held
to the same tolerance, since it sets the grader's tolerances.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from probes.compare import RESOLUTION, SideOutput, compare_outputs
from probes.context import make_context
from probes.differential import prepare_root
from probes.probe_format import read_probe_file
from probes.reference_cache import reference_runs, reseeded
from probes.sides import _readable as readable
from probes.sides import load_arrays, slot
from task_model.model import Task, TaskError

DRIFT_SPREAD = 2.0
DEFAULT_SAMPLE = 4
RECORDER_TIMEOUT_S = 900.0


class Drift(BaseModel):
    """One re-run probe's reference, against its frozen copy."""

    probe: str = Field(description="The probe's slot under tests/refs/ (file stem and probe name).")
    drifted: list[str] = Field(default_factory=list, description="One line per quantity that drifted.")
    error: str | None = Field(default=None, description="Why the reference could not be re-run or read.")

    @property
    def passed(self) -> bool:
        return self.error is None and not self.drifted


def has_recorded_probes(task: Task) -> bool:
    """Whether the task's grader says how its references were recorded (a `twin task new` spec)."""
    return (task.tests_dir / "spec.json").is_file()


def check_recorder(task: Task, *, sandbox: str, timeout_s: float = RECORDER_TIMEOUT_S) -> Drift:
    """Run the task's own recorder with `--check` on the reference side; its `drifted:` lines, if any.

    The recorder (`reference_check` of `[metadata.twin]`) and the task's tests/ are handed to the
    reference side read-only, under a task-shaped folder (the recorder finds its frozen
    references beside itself); it is told where the original is (`ORIGINAL_DIR`) and the assets
    (`ASSETS_DIR`), and writes only to its scratch directory (`TMPDIR`).

    Raises:
        TaskError: the task names no recorder, or one it does not hold.
    """
    recorder = task.settings.reference_check
    if not recorder:
        raise TaskError(f"task {task.name}: [metadata.twin] names no reference_check recorder")
    relative = Path(recorder)
    if relative.is_absolute() or ".." in relative.parts or not (task.root / relative).is_file():
        raise TaskError(f"task {task.name}: reference_check {recorder!r} is not a file of the task")
    name = f"recorder {relative.as_posix()}"
    with tempfile.TemporaryDirectory(prefix="twin-drift-") as tmp:
        empty = Path(tmp) / "candidate"
        empty.mkdir()
        ctx = make_context(task, empty, sandbox_kind=sandbox, workdir=Path(tmp) / "work", timeout_s=timeout_s)
        try:
            given, work = ctx.side_given("reference"), ctx.side_work("reference")
            for folder in (given, work):
                folder.mkdir(parents=True, exist_ok=True)
            shutil.copytree(task.tests_dir, given / "task" / "tests", symlinks=False)
            if not (given / "task" / relative).is_file():
                shutil.copy2(task.root / relative, given / "task" / relative)
            readable(given)
            roots = ctx.roots("reference")
            inside_work = ctx.inside("reference", work)
            env = {"ORIGINAL_DIR": roots["source"] or "", "ASSETS_DIR": roots["assets"] or "", "TMPDIR": inside_work,
                   "HOME": inside_work, "MPLCONFIGDIR": inside_work, **ctx.side_env()}  # fmt: skip
            script = f"{ctx.inside('reference', given / 'task' / relative)}"
            result = ctx.sandbox("reference").exec(
                [sys.executable, script, "--check"], cwd=inside_work, env=env, timeout_s=timeout_s
            )
        finally:
            ctx.close()
    lines = result.stdout.splitlines()
    drifted = [line.removeprefix("drifted: ").strip() for line in lines if line.startswith("drifted: ")]
    if result.returncode == 0 and not drifted:
        return Drift(probe=name)
    if result.returncode == 1 and drifted:
        return Drift(probe=name, drifted=drifted)
    tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [f"exit {result.returncode}"]
    return Drift(probe=name, error=f"the recorder's check did not run through: {tail[0][:300]}")


def sample_entries(entries: list[dict], size: int) -> list[dict]:
    """`size` of the differential probes, spread evenly over their recorded order (all when fewer)."""
    matched = [e for e in entries if e.get("mode") == "candidate"]
    if size >= len(matched):
        return matched
    picks = np.linspace(0, len(matched) - 1, num=size).round().astype(int)
    return [matched[i] for i in sorted(set(picks.tolist()))]


def check_reference_drift(task: Task, *, sandbox: str, size: int = DEFAULT_SAMPLE) -> list[Drift]:
    """Re-run `size` probes' reference side on the original and compare with their frozen references.

    Raises:
        TaskError: the task has no `tests/spec.json` (nothing says how its references were made).
    """
    spec_path = task.tests_dir / "spec.json"
    if not spec_path.is_file():
        raise TaskError(f"task {task.name}: no tests/spec.json, so nothing says how its references were recorded")
    spec = json.loads(spec_path.read_text())
    chosen = sample_entries(spec.get("probes", []), size)
    by_file: dict[str, list[dict]] = {}
    for entry in chosen:
        by_file.setdefault(entry["file"], []).append(entry)
    drifts: list[Drift] = []
    with tempfile.TemporaryDirectory(prefix="twin-drift-") as tmp:
        empty = Path(tmp) / "candidate"
        empty.mkdir()
        ctx = make_context(
            task, empty, sandbox_kind=sandbox, workdir=Path(tmp) / "work", timeout_s=float(spec.get("timeout_s", 600))
        )
        try:
            for file_name, entries in by_file.items():
                drifts += _rerun_file(ctx, task.tests_dir, file_name, entries)
        finally:
            ctx.close()
    return drifts


def _rerun_file(ctx, tests: Path, file_name: str, entries: list[dict]) -> list[Drift]:
    file = read_probe_file(tests / file_name)
    pairs = file.names()
    names = [e["name"] for e in entries if e["name"] in pairs]
    missing = [Drift(probe=e["slot"], error=f"{file_name} has no probe {e['name']!r} now") for e in entries
               if e["name"] not in pairs]  # fmt: skip
    if not names:
        return missing
    root = prepare_root(ctx, file, names)
    runs = []
    for entry in entries:
        if entry["name"] not in pairs:
            continue
        name, frozen = entry["name"], tests / "refs" / entry["slot"]
        shutil.rmtree(root / slot(name) / "inputs")
        shutil.copytree(frozen / "inputs", root / slot(name) / "inputs")
        runs.append({"out": f"{slot(name)}/ref", "dtype": ctx.dtype, "name": name, "inputs": f"{slot(name)}/inputs"})
        if entry.get("noise", "float64") == "float64":
            runs.append({"out": f"{slot(name)}/ref64", "dtype": "float64", "name": name,
                         "inputs": f"{slot(name)}/inputs"})  # fmt: skip
    timeout = ctx.timeout_s + sum(float(pairs[n].get("timeout_s") or 0) for n in names)
    results = reference_runs(ctx, root, file, names, runs, timeout, reseeded({n: pairs[n] for n in names}))
    drifts = list(missing)
    for entry in entries:
        if entry["name"] in pairs:
            drifts.append(_compare_entry(entry, results, tests / "refs" / entry["slot"]))
    return drifts


def _compare_entry(entry: dict, results: dict, frozen: Path) -> Drift:
    name = entry["name"]
    now = results.get((name, "ref"), {})
    noise = results.get((name, "ref64"), {}) if (name, "ref64") in results else results.get((name, "ref2"), {})
    if not now.get("ok") or not noise.get("ok"):
        failed = now if not now.get("ok") else noise
        last = (failed.get("trace") or "").strip().splitlines()[-1:] or ["no output"]
        return Drift(probe=entry["slot"], error=f"the reference side failed on the original now: {last[0]}")
    drifted: list[str] = []
    for part, label in (("ref", ""), ("noise", " (noise run)")):
        try:
            kept = _frozen_output(frozen / part)
        except (OSError, ValueError) as exc:
            return Drift(probe=entry["slot"], error=f"its frozen {part}/ cannot be read: {exc}")
        rerun, other = (now, noise) if part == "ref" else (noise, now)
        lines = drift_lines(rerun["output"], kept, other["output"], entry.get("compare") or {})
        drifted += [f"{line}{label}" for line in lines]
    return Drift(probe=entry["slot"], drifted=drifted)


def drift_lines(rerun: SideOutput, kept: SideOutput, other: SideOutput, measures: dict) -> list[str]:
    """Each quantity of `kept` that differs from `rerun` beyond the pair's own noise.

    Args:
        rerun: the output the original gives now (working dtype, or the noise run).
        kept: its frozen copy.
        other: the other run of the pair now: `d(rerun, other)` is the noise.
        measures: the probe's `compare` (output path or glob -> measure).
    """
    judged = compare_outputs(rerun, kept, other, measures)
    lines = [f"{item} (structure)" for item in judged.structure]
    for leaf in judged.leaves:
        where = leaf.path or "<output>"
        if leaf.measure in ("exact", "banded"):
            if not leaf.ok:
                lines.append(f"{where}: {leaf.measure} score {leaf.score:.9g} beyond its noise")
            continue
        tolerance = DRIFT_SPREAD * max(leaf.noise, RESOLUTION)
        distance = 1.0 - leaf.score
        if not distance <= tolerance:
            lines.append(f"{where}: distance {distance:.3g} > tolerance {tolerance:.3g} (its noise {leaf.noise:.3g})")
    return lines


def _frozen_output(folder: Path) -> SideOutput:
    manifest = json.loads((folder / "manifest.json").read_text())
    arrays = load_arrays(folder / "arrays.npz") if (folder / "arrays.npz").is_file() else {}
    return SideOutput(manifest.get("outputs", {}), arrays)
