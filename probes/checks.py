"""Candidate-side checks: properties of the candidate alone, each a probe of its own.

- `imports_check()`: every module of the candidate imports on the candidate side
  (torch absent), and — as the property `independence` — neither the candidate's
  files (statically) nor its code at run time import the source framework.
- `audit_check()`: the static migration audit (`probes.audit`), one property per
  kind of finding: wrapping the original, vendoring it, transliterating it.
- `candidate_check(path, name)`: a `check_<name>` function of a probe file run on
  the candidate side only (parameter tree, gradient liveness, jit tracing, entry
  points, checkpoint conversion): every boolean it returns must be true.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from evidence_store.records import Outcome, ProbeResult, Property
from ground.agent_tree import remove_tree
from probes.audit import audit_candidate
from probes.audit_base import scan
from probes.base import Probe, base_context, not_established
from probes.context import ProbeContext
from probes.layout import module_name
from probes.outcomes import crash_result
from probes.probe_format import ProbeFile, property_of, read_probe_file
from probes.sides import DRIVER, candidate_roots, run_side

IMPORTS = Property(
    id="imports",
    kind="imports",
    level=0,
    description="Every module of the candidate imports without the source framework.",
)
INDEPENDENCE = Property(
    id="independence",
    kind="independence",
    level=0,
    description="No file of the candidate imports the source framework, statically or at run time.",
)
AUDIT_PROPERTIES = {
    "loads_original": Property(
        id="audit.wrapping",
        kind="audit",
        level=0,
        description="The candidate neither imports, loads nor shells out to the original.",
    ),
    "vendored": Property(
        id="audit.vendored",
        kind="audit",
        level=0,
        description="The candidate holds no copy of the original's framework code.",
    ),
    "transliteration": Property(
        id="audit.transliteration",
        kind="audit",
        level=0,
        description="No candidate file restates an original file statement for statement.",
    ),
}


def _check_dir(ctx: ProbeContext, name: str) -> Path:
    root = ctx.workdir / "checks" / name
    if root.exists():
        remove_tree(root)  # the candidate side wrote here: any depth
    root.mkdir(parents=True)
    shutil.copy(DRIVER, root / "driver.py")
    return root


def _module_of(ctx: ProbeContext, rel: str) -> str:
    """'pkg/mod.py' -> 'pkg.mod', as the task imports it (the component a finding in that file names)."""
    if Path(rel).name in ("", ".", ".."):
        return ""
    return module_name(rel, candidate_roots(ctx))


def imports_check() -> Probe:
    """Import every candidate module with the source framework absent; report imports and independence."""

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        context = base_context(ctx, "probes.checks:imports_check")
        root = _check_dir(ctx, "imports")
        (run,) = run_side(ctx, root, "candidate", [{"out": "out", "dtype": ctx.dtype}], mode="imports")
        static = [
            f
            for f in audit_candidate(
                ctx.candidate,
                ctx.source,
                forbidden=ctx.forbidden("candidate"),
                source_mount=ctx.task.settings.source_mount,
                transliteration=False,
            )
            if f.kind == "forbidden_import"
        ]
        if not run["ok"]:
            # a run the candidate ended or broke has not passed either half (probes.outcomes)
            return [
                crash_result(IMPORTS, run, context, not_fitting="the import check could not run ({blame})"),
                _independence(ctx, static, [], context, "")
                if static  # what the files show statically does not need the run
                else crash_result(INDEPENDENCE, run, context, not_fitting="the import check could not run ({blame})"),
            ]
        modules = run["report"]["modules"]
        failed = {name: m for name, m in modules.items() if not m["ok"]}
        incomplete = scan(ctx.candidate).incomplete
        if incomplete:  # modules kept out of the check have not passed it
            failed["(unchecked)"] = {
                "ok": False,
                "file": "(unchecked)",
                "error": f"not every module was reached: {incomplete}",
                "trace": "",
            }
        cand_root = (ctx.roots("candidate")["candidate"] or "").rstrip("/") + "/"
        runtime = [
            a
            for a in run["report"]["forbidden_imports"]
            if (a.get("importer") or {}).get("file", "").startswith(cand_root)
        ]
        results = []
        first_failed = next((_module_of(ctx, m.get("where") or m["file"]) for m in failed.values()), None)
        if not failed and not modules:
            results.append(not_established(IMPORTS, "the candidate has no Python module", context=context))
        else:
            results.append(
                ProbeResult(
                    property=IMPORTS,
                    outcome=Outcome.VIOLATED if failed else Outcome.ESTABLISHED,
                    score=max(0.0, 1.0 - len(failed) / max(len(modules), 1)),
                    context=context,
                    observations={
                        "modules": len(modules),
                        "failed": {n: m["error"] for n, m in failed.items()},
                        **(
                            {"message": "; ".join(f"{n}: {m['error']}" for n, m in failed.items())[:2000]}
                            if failed
                            else {}
                        ),
                    },
                    trace="\n".join(m["trace"] for m in failed.values())[-8000:],
                )
            )
            if first_failed:
                results[-1].context = {**context, "component": first_failed}
        results.append(_independence(ctx, static, runtime, context, cand_root))
        return results

    return probe


def _independence(ctx: ProbeContext, static: list, runtime: list[dict], context: dict, cand_root: str) -> ProbeResult:
    """Independence from the static findings and the imports seen at run time."""
    findings = [f.as_dict() for f in static] + [
        {
            "kind": "runtime_import",
            "file": a["importer"]["file"].removeprefix(cand_root),
            "line": a["importer"]["line"],
            "detail": f"imports {a['module']} at run time",
        }
        for a in runtime
    ]
    return ProbeResult(
        property=INDEPENDENCE,
        outcome=Outcome.VIOLATED if findings else Outcome.ESTABLISHED,
        score=0.0 if findings else 1.0,
        context={**context, **({"component": _module_of(ctx, findings[0]["file"])} if findings else {})},
        observations={
            "findings": findings,
            **(
                {"message": "; ".join(f"{f['file']}:{f['line']} {f['detail']}" for f in findings)[:2000]}
                if findings
                else {}
            ),
        },
    )


def audit_check(transliteration: bool = True) -> Probe:
    """The static migration audit as one result per kind of finding."""

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        context = base_context(ctx, "probes.checks:audit_check", transliteration=transliteration)
        findings = audit_candidate(
            ctx.candidate,
            ctx.source,
            forbidden=ctx.forbidden("candidate"),
            source_mount=ctx.task.settings.source_mount,
            transliteration=transliteration,
            import_roots=candidate_roots(ctx),
        )
        results = []
        for kind, prop in AUDIT_PROPERTIES.items():
            if kind == "transliteration" and not transliteration:
                continue
            mine = [f.as_dict() for f in findings if f.kind == kind]
            observations = {"findings": mine}
            if mine:
                observations["message"] = "; ".join(f"{f['file']}:{f['line']} {f['detail']}" for f in mine)[:2000]
            results.append(
                ProbeResult(
                    property=prop,
                    outcome=Outcome.VIOLATED if mine else Outcome.ESTABLISHED,
                    score=0.0 if mine else 1.0,
                    context=context,
                    observations=observations,
                )
            )
        return results

    return probe


def _false_leaves(manifest: dict, arrays: dict) -> list[str]:
    bad = []
    for path, entry in manifest.items():
        if entry["kind"] == "value" and entry.get("value") is False:
            bad.append(path)
        elif entry["kind"] == "array" and entry["dtype"] == "bool" and not bool(arrays[entry["key"]].all()):
            bad.append(path)
    return bad


def candidate_check(path: str, name: str) -> Probe:
    """A `check_<name>` function of a probe file, run on the candidate side only.

    The function returns named values; every boolean among them must be true. A
    crash in the candidate's code is violated, one in the probe's code not_established.
    """
    return file_checks(path, [name])


def file_checks(path: str, names: list[str] | None = None) -> Probe:
    """Every `check_*` function of the probe file at `path` (or those in `names`), read when the probe runs.

    See `checks_probe`, which runs them.
    """

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        file = read_probe_file(path)
        return checks_probe(file, chosen_checks(file, names))(ctx)

    return probe


def chosen_checks(file: ProbeFile, names: list[str] | None) -> dict[str, dict]:
    """The checks of `file` named in `names` (all of them for None), with their metadata ({} for one it lacks)."""
    found = file.names(checks=True)
    return {name: found.get(name, {}) for name in (sorted(found) if names is None else names)}


def checks_probe(file: ProbeFile, checks: dict[str, dict]) -> Probe:
    """Candidate-only checks of a probe file as read, run in one candidate-side process; one result per check.

    Args:
        file: the probe file as read (`probes.probe_format.read_probe_file`): its text is
            what the candidate side runs.
        checks: check name -> metadata, as `file.names(checks=True)` gives them.
    """

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        return run_candidate_checks(ctx, file, checks)

    return probe


def run_candidate_checks(ctx: ProbeContext, file: ProbeFile, checks: dict[str, dict]) -> list[ProbeResult]:
    """Run candidate-only checks of one file (name -> metadata); one result per check."""
    digest = hashlib.sha1(str(file.path.resolve()).encode()).hexdigest()[:8]
    root = _check_dir(ctx, f"{file.path.stem}-{digest}")
    (root / "probe.py").write_bytes(file.data)
    runs = [{"out": f"{name or '_'}", "dtype": ctx.dtype, "name": name} for name in checks]
    timeout = ctx.timeout_s + sum(float(meta.get("timeout_s") or 0) for meta in checks.values())
    outcomes = run_side(ctx, root, "candidate", runs, mode="check", timeout_s=timeout, config_name="checks")
    return [
        _decide_check(ctx, file.path, name, meta, run)
        for (name, meta), run in zip(checks.items(), outcomes, strict=True)
    ]


def _decide_check(ctx: ProbeContext, file: Path, name: str, meta: dict, run: dict) -> ProbeResult:
    pid, kind, level = property_of(file, name, meta, kind="check", level=0)
    fallback = f"the candidate-only check {name or file.stem!r} ({kind}) holds on the candidate"
    prop = Property(id=pid, kind=kind, level=level, description=str(meta.get("description") or fallback))
    context = base_context(ctx, "probes.checks:candidate_check", path=str(file), name=name)
    context.update(
        {
            "probe_file": str(file),
            "probe_name": name,
            "component": meta.get("component"),
            "uses": meta.get("uses", []),
            **({"mode": meta["mode"]} if "mode" in meta else {}),  # PROBES "mode": localization
        }
    )
    if not run["ok"]:
        return crash_result(
            prop,
            run,
            context,
            not_fitting="the check failed in {blame} code: its calling convention may not fit the candidate",
        )
    output = run["output"]
    bad = _false_leaves(output.manifest, output.arrays)
    values = {p: e.get("value") for p, e in output.manifest.items() if e["kind"] == "value"}
    observations = {"values": values, "timing": {"candidate_compute_s": run["report"]["compute_s"]}}
    if bad:
        observations["message"] = "false: " + ", ".join(bad)
        if meta.get("locate_failures") and meta.get("component"):
            # The failing output's own name (e.g. 'model.hidden_states') locates the divergence.
            context["component"] = f"{meta['component']}.{bad[0]}"
    booleans = [e for e in output.manifest.values() if isinstance(e.get("value"), bool) or e.get("dtype") == "bool"]
    if not booleans:
        return not_established(prop, "the check returned no boolean to decide on", context=context)
    return ProbeResult(
        property=prop,
        outcome=Outcome.VIOLATED if bad else Outcome.ESTABLISHED,
        score=1.0 - len(bad) / len(booleans),
        context=context,
        observations=observations,
    )
