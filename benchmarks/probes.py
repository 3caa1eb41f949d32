"""Measure the probe suite on the bundled tasks: oracle, seeded defects, localization, overhead.

For each task: the oracle candidate (`solution/app`, copied) must have no violated
property and at least 90% established; every seeded defect
(`tests/benchmark_adapter/defects/<task>.py`) should produce a violated property,
and divergence localization should name the defect's component. Wall time of the
full suite is printed next to the time of the bare computations it runs (the
reference and candidate functions themselves), so the harness's overhead shows
as a ratio (the two timed oracle runs go one probe file at a time; `--jobs` applies to
the defects).

    python benchmarks/probes.py [--task mlp-train ...] [--no-defects] [--sandbox bwrap|none]
                                [--jobs N] [--limit K] [--out results.json]
    python benchmarks/probes.py --rescore results.json   # localize again from recorded results
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmark_adapter.grading.defects import apply_defect  # noqa: E402
from benchmark_adapter.grading.sweep import load_defects  # noqa: E402
from evidence_store.records import Outcome, ProbeResult, Property  # noqa: E402
from ground.untrusted_io import write_text_atomic  # noqa: E402
from probes.context import make_context  # noqa: E402
from probes.localize import localization_verdict, localize_divergence  # noqa: E402
from probes.probe_format import probe_names  # noqa: E402
from probes.suite import builtin_checks, run_suite, task_probe_files, task_probes  # noqa: E402
from task_model.loader import load_task  # noqa: E402

TASKS = ROOT / "tasks" / "t2j-mini"
OTHER_TASKS = ROOT / "tasks"  # bundled tasks outside t2j-mini (litgpt-lora), by name


def task_dir(name: str) -> Path:
    """A bundled task by name: t2j-mini's first, then the other bundled tasks."""
    return TASKS / name if (TASKS / name).is_dir() else OTHER_TASKS / name


def lists_probe_files(folder: Path) -> bool:
    """Whether `folder` is a task whose task.toml lists probe files of its own."""
    return (folder / "task.toml").is_file() and bool(load_task(folder).settings.probe_files)


DEFECTS = ROOT / "tests" / "benchmark_adapter" / "defects"
VERDICTS = ("exact", "counterpart", "module", "no")


def task_defects(task_name: str) -> list:
    path = DEFECTS / f"{task_name.replace('-', '_')}.py"
    if not path.is_file():
        return []
    return load_defects(path)


def bare_seconds(results, sides=("reference", "candidate")) -> float:
    """Seconds spent in the probes' own functions (the computations), summed over results."""
    total = 0.0
    for r in results:
        timing = r.observations.get("timing", {})
        total += sum(timing.get(f"{side}_compute_s", 0.0) for side in sides)
    return total


@contextmanager
def timed_suite(task, candidate: Path, args, cache: Path, jobs: int | None = None):
    """The full suite on `candidate`, as (the `run_suite` block's run, its wall seconds)."""
    probes = builtin_checks(task) + task_probes(task)
    start = time.perf_counter()
    with run_suite(
        task, candidate, probes, jobs=jobs or args.jobs, sandbox_kind=args.sandbox, reference_cache=cache
    ) as suite:
        yield suite, time.perf_counter() - start


def summarize(results) -> dict:
    counts = {o.value: sum(r.outcome is o for r in results) for o in Outcome}
    return {
        "counts": counts,
        "n": len(results),
        "violated": sorted(r.property.id for r in results if r.outcome is Outcome.VIOLATED),
        "not_established": sorted(
            r.property.id for r in results if r.outcome is Outcome.NOT_ESTABLISHED
        ),
    }


def bench_task(name: str, args, scratch: Path) -> dict:
    task = load_task(task_dir(name))
    oracle = scratch / name / "oracle"
    shutil.copytree(
        task.root / "solution" / "app", oracle, ignore=shutil.ignore_patterns("__pycache__")
    )
    cache = scratch / name / "reference-cache"
    # The timed runs go one probe file at a time, so wall and bare time compare like for like.
    with timed_suite(task, oracle, args, cache, jobs=1) as (suite, wall):
        results = suite.results
    bare_first = bare_seconds(results)
    summary = summarize(results)
    established = summary["counts"]["established"] / max(1, summary["n"])
    # Second oracle run: the reference comes from the cache, so this is the suite's cost per candidate.
    with timed_suite(task, oracle, args, cache, jobs=1) as (suite, wall_cached):
        again = suite.results
    bare = bare_seconds(again, ("candidate",))
    print(
        f"\n== {name}: {summary['n']} properties; oracle {summary['counts']}; "
        f"established {established:.0%}; violated {summary['violated'] or 'none'}"
    )
    if summary["not_established"]:
        print(f"   not established on the oracle: {summary['not_established']}")
    print(
        f"   full suite, first run (reference and candidate): wall {wall:.1f}s, bare computations "
        f"{bare_first:.1f}s, ratio {wall / max(bare_first, 1e-9):.2f}"
    )
    print(
        f"   full suite per further candidate (reference cached): wall {wall_cached:.1f}s, bare candidate "
        f"computations {bare:.1f}s, ratio {wall_cached / max(bare, 1e-9):.2f}"
    )
    report = {
        "task": name,
        "oracle": summary,
        "oracle_established_fraction": established,
        "wall_first_s": wall,
        "bare_first_s": bare_first,
        "wall_per_candidate_s": wall_cached,
        "bare_candidate_s": bare,
        "defects": [],
    }
    if args.no_defects:
        return report
    defects = task_defects(name)[: args.limit or None]
    for defect in defects:
        dest = scratch / name / f"defect-{defect.name}"
        apply_defect(oracle, defect, dest)
        with timed_suite(task, dest, args, cache) as (suite, dwall):
            res = suite.results
            found = localize_divergence(suite.ctx, res)
        component = found.observations["component"] if found else None
        verdict = localization_verdict(component, defect.component, task.source_dir, oracle)
        violated = sorted(r.property.id for r in res if r.outcome is Outcome.VIOLATED)
        report["defects"].append(
            {
                "name": defect.name,
                "component": defect.component,
                "violated": violated,
                "localized": component,
                "localization": verdict,
                "wall_s": dwall,
                # enough of every result to localize again without re-running (--rescore)
                "results": [
                    {
                        "id": r.property.id,
                        "kind": r.property.kind,
                        "level": r.property.level,
                        "outcome": r.outcome.value,
                        "component": r.context.get("component"),
                        "uses": r.context.get("uses") or [],
                    }
                    for r in res
                ],
            }
        )
        print_defect(report["defects"][-1])
    return report


def print_defect(d: dict) -> None:
    """One line for a defect: caught or not, where localization points, what it should name."""
    print(
        f"   {d['name']:32} {'caught' if d['violated'] else 'MISSED':6} localized {d['localized']!s:45} "
        f"want {d['component']:35} {d['localization']:11} ({d['wall_s']:.0f}s) {d['violated'][:4]}"
    )


def probe_metadata(task) -> dict[str, dict]:
    """Property id -> metadata of every probe and check in the task's own probe files, as they are now."""
    found = {}
    for path in task_probe_files(task):
        for checks in (False, True):
            for meta in probe_names(path, checks=checks).values():
                if meta.get("id"):
                    found[meta["id"]] = meta
    return found


def _recorded_kind(result: dict, meta: dict) -> str:
    """The property kind of a recorded result (older records lack it: take it from the probe files)."""
    if result.get("kind"):
        return result["kind"]
    if meta:
        return meta.get("kind", "differential")
    return "check"


def rescore(path: Path) -> list[dict]:
    """Localize every recorded defect again with the current code and probe metadata (no probe runs)."""
    reports = json.loads(path.read_text())
    scratch = Path(tempfile.mkdtemp(prefix="twin-rescore-"))
    try:
        for report in reports:
            task = load_task(task_dir(report["task"]))
            oracle = task.root / "solution" / "app"
            ctx = make_context(task, oracle, sandbox_kind="none", workdir=scratch)
            wanted = {d.name: d.component for d in task_defects(report["task"])}
            metadata = probe_metadata(task)
            print(f"\n== {report['task']}")
            for d in report["defects"]:
                results = []
                for r in d["results"]:
                    meta = metadata.get(r["id"], {})
                    component = r["component"]
                    if meta.get("component") and not meta.get("locate_failures"):
                        component = meta["component"]
                    results.append(
                        ProbeResult(
                            property=Property(
                                id=r["id"], kind=_recorded_kind(r, meta), level=meta.get("level", r["level"])
                            ),
                            outcome=Outcome(r["outcome"]),
                            context={"component": component, "uses": meta.get("uses", r["uses"])},
                        )
                    )
                found = localize_divergence(ctx, results)
                d["component"] = wanted.get(d["name"], d["component"])
                d["localized"] = found.observations["component"] if found else None
                d["localization"] = localization_verdict(
                    d["localized"], d["component"], task.source_dir, oracle
                )
                print_defect(d)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return reports


def summarize_defects(reports: list[dict]) -> None:
    """Caught and localized, per task and over all tasks."""
    every = []
    for report in reports:
        every += report["defects"]
        caught = [d for d in report["defects"] if d["violated"]]
        if report["defects"]:
            _print_score(report["task"], report["defects"], caught)
    if every:
        _print_score("all tasks", every, [d for d in every if d["violated"]])


def _print_score(label: str, defects: list[dict], caught: list[dict]) -> None:
    named = sum(d["localization"] in ("exact", "counterpart") for d in caught)
    counts = {v: sum(d["localization"] == v for d in caught) for v in VERDICTS}
    print(
        f"== {label}: defects caught {len(caught)}/{len(defects)} ({len(caught) / len(defects):.0%}); "
        f"localization names the defective component for {named}/{len(caught)} caught "
        f"({named / max(1, len(caught)):.0%}): " + ", ".join(f"{v} {c}" for v, c in counts.items())
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", action="append", help="task name (default: every t2j-mini task that lists probe files)"
    )
    parser.add_argument("--no-defects", action="store_true", help="only the oracle")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="at most this many defects per task")
    parser.add_argument("--out", type=Path, help="write the measurements as JSON")
    parser.add_argument(
        "--rescore", type=Path, help="localize the defects of an earlier --out file again, run nothing"
    )
    args = parser.parse_args(argv)
    if args.rescore:
        reports = rescore(args.rescore)
        print()
        summarize_defects(reports)
        return 0
    names = args.task or [p.name for p in sorted(TASKS.iterdir()) if lists_probe_files(p)]
    scratch = Path(tempfile.mkdtemp(prefix="twin-bench-probes-"))
    reports = []
    try:
        for name in names:
            reports.append(bench_task(name, args, scratch))
            if args.out:  # after every task, so a later failure keeps what was measured
                write_text_atomic(args.out, json.dumps(reports, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    summarize_defects(reports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
