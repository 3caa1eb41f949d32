"""Recording the references of a grader made by `twin task new`, from the original.

Each probe's reference side runs on the original exactly as `twin probe` runs it
(inputs drawn and saved, the original at the working dtype, then in float64 or
again for the noise floor). What the grader needs is kept in the task's
`tests/refs/<file>.<probe>/{inputs,ref,noise}/`, and `tests/spec.json` lists the
probes (differential and `check_`), the forbidden packages, where the candidate
and the assets are, the seed and the environment both sides ran with.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import tempfile
from pathlib import Path

from probes.context import make_context
from probes.differential import prepare_root
from probes.probe_format import ProbeFile, property_of, read_probe_file
from probes.reference_cache import reference_runs, reseeded
from probes.sides import slot
from task_model.model import Task, TaskError


def record_references(task: Task, *, sandbox: str, timeout_s: float) -> dict:
    """Run the reference side of every probe on the original; write tests/refs and tests/spec.json."""
    tests = task.tests_dir
    refs = tests / "refs"
    shutil.rmtree(refs, ignore_errors=True)
    refs.mkdir()
    entries = []
    with tempfile.TemporaryDirectory(prefix="twin-task-new-") as tmp:
        empty = Path(tmp) / "candidate"
        empty.mkdir()
        ctx = make_context(task, empty, sandbox_kind=sandbox, workdir=Path(tmp) / "work", timeout_s=timeout_s)
        try:
            for file in map(read_probe_file, sorted((tests / "probes").glob("*.py"))):
                pairs = file.names()
                entries += _record_file(ctx, file, pairs, refs, prepare_root, reference_runs, slot)
                for name, meta in file.names(checks=True).items():
                    entries.append(_entry(file.path, name, meta, "check", kind_prefix="check"))
        finally:
            ctx.close()
    spec = {
        "probes": entries,
        "forbidden": list(task.settings.forbidden_packages),
        "app_mount": task.settings.candidate_mount,
        "assets_mount": task.settings.assets_mount,
        "seed": ctx.seed,
        "timeout_s": timeout_s,
        "env": ctx.side_env(),
        "recorded_with": _versions(),
    }
    (tests / "spec.json").write_text(json.dumps(spec, indent=2))
    return spec


def _record_file(ctx, file: ProbeFile, pairs: dict, refs: Path, prepare, reference_runs, slot_of) -> list[dict]:
    names = sorted(pairs)
    if not names:
        return []
    root = prepare(ctx, file, names)
    runs = []
    for name in names:
        slot = slot_of(name)
        runs.append(
            {"out": f"{slot}/ref", "dtype": ctx.dtype, "make_inputs": True, "name": name, "inputs": f"{slot}/inputs"}
        )
        if pairs[name].get("noise", "float64") == "float64":
            runs.append({"out": f"{slot}/ref64", "dtype": "float64", "name": name, "inputs": f"{slot}/inputs"})
    timeout = ctx.timeout_s + sum(float(m.get("timeout_s") or 0) for m in pairs.values())
    results = reference_runs(ctx, root, file, names, runs, timeout, reseeded(pairs))
    entries = []
    for name in names:
        ref, noise_key = results[(name, "ref")], "ref64"
        if not ref["ok"]:
            last = (ref.get("trace") or "").strip().splitlines()[-1:] or ["no output"]
            raise TaskError(
                f"probe {file.path.name}:{name or '<file>'}: the reference side failed on the original: {last[0]}"
            )
        if not results.get((name, "ref64"), {}).get("ok"):
            noise_key = "ref2"
            if not results.get((name, "ref2"), {}).get("ok"):
                raise TaskError(f"probe {file.path.name}:{name}: the reference's noise run failed")
        entry = _entry(file.path, name, pairs[name], "candidate")
        src = root / slot_of(name)
        for part, target in (("inputs", "inputs"), ("ref", "ref"), (noise_key, "noise")):
            keep = ("inputs.json", "inputs.npz") if part == "inputs" else ("manifest.json", "arrays.npz")
            (refs / entry["slot"] / target).mkdir(parents=True)
            for fname in keep:
                origin, copy = src / part / fname, refs / entry["slot"] / target / fname
                if fname == "manifest.json" and origin.is_file():
                    # the structure of the outputs only: no timings, so re-recording the same
                    # original gives the same files
                    outputs = json.loads(origin.read_text()).get("outputs", {})
                    copy.write_text(json.dumps({"outputs": outputs}, indent=1, sort_keys=True))
                elif origin.is_file():
                    shutil.copy2(origin, copy)
        entry["noise"] = "float64" if noise_key == "ref64" else pairs[name].get("noise", "rerun")
        entries.append(entry)
    return entries


def _entry(file: Path, name: str, meta: dict, mode: str, kind_prefix: str = "") -> dict:
    stem = file.stem
    # the id and level twin probe gives the same property (probe_format.property_of): checks 0, matched probes 1
    kind, level = ("check", 0) if mode == "check" else ("differential", 1)
    pid, _, level = property_of(file, name, meta, kind=kind, level=level)
    return {
        "file": f"probes/{file.name}",
        "name": name,
        "slot": f"{stem}.{kind_prefix}{'_' if kind_prefix else ''}{name or '_'}",
        "mode": mode,
        "id": pid,
        "level": level,
        "compare": meta.get("compare") or {},
        "component": meta.get("component"),
        "description": meta.get("description", ""),
    }


def _versions() -> dict:
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for package in ("torch", "numpy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions
