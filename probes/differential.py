"""Matched differential probes: the same program contract run on the original and the candidate.

A probe file (`probes.probe_format`) defines, for each probe name, an `inputs`
function (reference side, seeded), a `reference` function (run with the original and
torch) and a `candidate` function (run with the candidate, torch absent).
`run_matched_probes` runs:

1. the reference at the working dtype, which also draws and saves the inputs;
2. the reference in float64 on the same inputs (or again at the working dtype
   where the probe cannot run in float64): its disagreement is the noise floor;
3. the candidate on the very same inputs;

(the reference side's runs come from `probes.reference_cache` where it holds them) and
decides each outcome by `probes.outcomes.decide_matched`. The first reference run records
which of the components the probe names (`component`, `uses`) it executed
(`probes/reference_trace.py`), and a counterfactual reference run tells whether the compared
output came from the probe's `component` (`probes.dependence`); the result carries both as its
`reference_run`.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from pydantic import ValidationError

from evidence_store.records import FrameworkCall, ProbeResult, Property, ReferenceRun
from ground.agent_tree import remove_tree
from probes.base import Probe, base_context
from probes.context import ProbeContext
from probes.dependence import OUT, SKIP_OUT, UNCHANGED, verdict
from probes.outcomes import decide_matched
from probes.probe_format import ProbeFile, ProbeFileError, property_of, read_probe_file
from probes.reference_cache import reference_runs, reseeded
from probes.sides import DRIVER, run_side, slot
from task_model.interface_names import on_interface

TRACE = Path(__file__).with_name("reference_trace.py")
"""The reference side's trace of what it ran (copied beside the driver)."""
STAND_INS = Path(__file__).with_name("counterfactual.py")
"""The counterfactual run's stand-ins (copied beside the driver)."""


def differential_probe(
    path: str,
    name: str = "",
    *,
    property_id: str | None = None,
    level: int | None = None,
    description: str | None = None,
    component: str | None = None,
    compare: dict[str, str] | None = None,
    noise: str | None = None,
    timeout_s: float | None = None,
) -> Probe:
    """A matched differential probe from one pair of functions in a probe file.

    Args:
        path: the probe file (host path).
        name: the probe's name in the file ('' for an unsuffixed pair).
        property_id, level, description, component, compare, noise, timeout_s:
            override the file's `PROBES[name]` metadata.
    """
    options = {
        k: v
        for k, v in dict(
            property_id=property_id,
            level=level,
            description=description,
            component=component,
            compare=compare,
            noise=noise,
            timeout_s=timeout_s,
        ).items()
        if v is not None
    }

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        file = read_probe_file(path)
        meta = file.names().get(name)
        if meta is None:
            raise ProbeFileError(f"{file.path}: no probe named {name!r}")
        meta.update({("id" if k == "property_id" else k): v for k, v in options.items()})
        rerun = {name: {"path": str(file.path), "name": name, **options}}
        return run_matched_probes(ctx, file, {name: meta}, rerun=rerun)

    return probe


def probe_file_probe(path: str, names: list[str] | None = None) -> Probe:
    """Every matched pair of the probe file at `path` (or those in `names`), read when the probe runs.

    See `pairs_probe`, which runs them.
    """

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        file = read_probe_file(path)
        found = file.names()
        chosen = {n: found[n] for n in (names if names is not None else sorted(found)) if n in found}
        missing = sorted(set(names or []) - set(found))
        if missing:
            raise ProbeFileError(f"{file.path}: no probe named {', '.join(missing)}")
        return pairs_probe(file, chosen)(ctx)

    return probe


def pairs_probe(file: ProbeFile, pairs: dict[str, dict]) -> Probe:
    """Matched pairs of a probe file as read, run together.

    Each side runs once for the whole file (one process imports torch or jax once),
    and every probe still gets its own inputs, outputs and result.

    Args:
        file: the probe file as read (`probes.probe_format.read_probe_file`): its text is
            what both sides run.
        pairs: probe name -> metadata, as `file.names()` gives them.
    """
    rerun = {n: {"path": str(file.path), "name": n} for n in pairs}

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        return run_matched_probes(ctx, file, pairs, rerun=rerun)

    return probe


def _property(file: Path, name: str, meta: dict) -> Property:
    pid, kind, level = property_of(file, name, meta, kind="differential", level=1)
    description = str(meta.get("description") or "")
    if not description:  # every property gets a line a reader can act on
        component = meta.get("component")
        exercised = f" (exercises {component})" if component else ""
        probe = name or file.stem
        description = f"the candidate's outputs for probe {probe!r} match the original's on the same inputs{exercised}"
    return Property(id=pid, kind=kind, level=level, description=description)


def prepare_root(ctx: ProbeContext, file: ProbeFile, names: list[str]) -> Path:
    """A fresh directory under the work directory for one file's probes: its driver, the file, a slot per probe."""
    digest = hashlib.sha1(f"{file.path.resolve()}:{','.join(names)}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", file.path.stem)[:40]
    root = ctx.workdir / "probes" / f"{slug}-{digest}"
    if root.exists():
        remove_tree(root)  # the sides wrote here: any depth
    for name in names:
        (root / slot(name) / "inputs").mkdir(parents=True)
    shutil.copy(DRIVER, root / "driver.py")
    shutil.copy(TRACE, root / TRACE.name)
    shutil.copy(STAND_INS, root / STAND_INS.name)
    (root / "probe.py").write_bytes(file.data)
    return root


def named_components(meta: dict) -> list[str]:
    """The components a probe names: its `component`, then what it `uses`."""
    uses = meta.get("uses") or []
    names = [meta.get("component"), *(uses if isinstance(uses, list) else [])]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def reference_run_of(ctx: ProbeContext, meta: dict, report: dict, counterfactual: str | None = None) -> ReferenceRun:
    """What the reference ran of the components its probe names, from its run's `reference_trace`, and
    whether the compared output came from the probe's `component`, from the counterfactual run's
    `verdict` (`probes.dependence`). Only the probe's own `component` can mark it (`ReferenceRun`):
    where it never ran, where the outputs stayed the same without it, and where the trace is missing
    or was disturbed inside the probe (not known counts as not established)."""
    component = meta.get("component") if isinstance(meta.get("component"), str) else None
    trace = report.get("reference_trace")
    if not isinstance(trace, dict) or not isinstance(trace.get("ran"), dict):
        missing = [component] if component else []
        return ReferenceRun(not_ran=missing, reason="trace missing" if missing else "", on_interface=_on(ctx, missing))
    try:
        calls = [FrameworkCall.model_validate(c) for c in trace.get("calls") or []]
    except ValidationError:
        calls = []
    ran = {str(name): value for name, value in trace["ran"].items()}
    reason = ""
    if component and trace.get("intact") is not True:
        reason = "trace disturbed"
    elif component and ran.get(component) is False:
        reason = "never ran"
    elif component and counterfactual == UNCHANGED:
        reason = "unchanged"
    not_ran = [component] if reason else []
    return ReferenceRun(
        ran=[name for name, value in ran.items() if value is True and reason != "trace disturbed"],
        not_ran=not_ran,
        reason=reason,
        counterfactual=counterfactual,
        uses_not_ran=[name for name, value in ran.items() if value is False and name not in not_ran],
        on_interface=_on(ctx, not_ran),
        calls=calls,
    )


def _on(ctx: ProbeContext, names: list[str]) -> list[str]:
    return [name for name in names if on_interface(ctx.task, name)]


def run_matched_probes(
    ctx: ProbeContext, file: ProbeFile, probes: dict[str, dict], *, rerun: dict[str, dict]
) -> list[ProbeResult]:
    """Run matched differential probes of one file and decide each outcome (see the module docstring).

    Args:
        probes: probe name -> metadata.
        rerun: probe name -> options of `differential_probe` that re-run it alone.
    """
    names = list(probes)
    root = prepare_root(ctx, file, names)
    sha1 = hashlib.sha1(file.data).hexdigest()
    timeout = ctx.timeout_s + sum(float(m.get("timeout_s") or 0) for m in probes.values())
    wants_f64 = {n for n, m in probes.items() if m.get("noise", "float64") == "float64"}
    runs = []
    for name in names:
        here = slot(name)
        runs.append(
            {
                "out": f"{here}/ref",
                "dtype": ctx.dtype,
                "make_inputs": True,
                "name": name,
                "inputs": f"{here}/inputs",
                **({"trace_components": named} if (named := named_components(probes[name])) else {}),
            }
        )
        if name in wants_f64:
            runs.append(
                {
                    "out": f"{here}/ref64",
                    "dtype": "float64",
                    "name": name,
                    "inputs": f"{here}/inputs",
                }
            )
    components = {n: c for n, m in probes.items() if isinstance(c := m.get("component"), str) and c}
    reference = reference_runs(ctx, root, file, names, runs, timeout, reseeded(probes), components)
    ok_names = [n for n in names if reference[(n, "ref")]["ok"]]
    cand_runs = [
        {"out": f"{slot(n)}/cand", "dtype": ctx.dtype, "name": n, "inputs": f"{slot(n)}/inputs"} for n in ok_names
    ]
    candidate = dict(
        zip(
            ok_names,
            run_side(ctx, root, "candidate", cand_runs, timeout_s=timeout, config_name="candidate")
            if cand_runs
            else [],
            strict=True,  # one result per run, as run_side promises
        )
    )
    results = []
    for name in names:
        meta = probes[name]
        context = base_context(ctx, "probes.differential:differential_probe", **rerun[name])
        context.update(
            {
                "probe_file": str(file.path),
                "probe_name": name,
                "dtype": ctx.dtype,
                "component": meta.get("component"),
                "uses": meta.get("uses", []),
                **({"mode": meta["mode"]} if "mode" in meta else {}),  # PROBES "mode": localization
                "probe_sha1": sha1,
            }
        )
        noise = reference.get((name, "ref64")) if name in wants_f64 else None
        if noise is None or not noise["ok"]:
            noise = reference.get((name, "ref2"))
            context["noise_source"] = "reseed" if meta.get("noise") == "reseed" else "rerun"
        else:
            context["noise_source"] = "float64"
        result = decide_matched(
            ctx,
            _property(file.path, name, meta),
            meta,
            context,
            root / slot(name),
            reference[(name, "ref")],
            noise,
            candidate.get(name),
        )
        first = reference[(name, "ref")]
        if first["ok"] and named_components(meta) and ctx.source is not None:
            said = verdict(first, reference.get((name, OUT)), reference.get((name, SKIP_OUT)))
            result.reference_run = reference_run_of(ctx, meta, first["report"], said)
        results.append(result)
    return results
