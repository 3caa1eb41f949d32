"""Matched differential probes: the same program contract run on the original and the candidate.

A probe file (format in `probes/README.md`) defines, for each probe name, an
`inputs` function (reference side, seeded), a `reference` function (run with the
original and torch) and a `candidate` function (run with the candidate, torch
absent). `run_matched_probe` runs:

1. the reference at the working dtype, which also draws and saves the inputs;
2. the reference in float64 on the same inputs (or again at the working dtype
   where the probe cannot run in float64): its disagreement is the noise floor;
3. the candidate on the very same inputs;

and compares structure, then numbers (`probes.compare`). Who is to blame for a
crash decides the outcome: the reference side crashing, or a crash ending in the
probe's own code, is not_established; one ending in the candidate's code is
violated. A candidate that tries to import a forbidden package violates too.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from evidence_store.records import Outcome, ProbeResult, Property
from harness.ground.agent_tree import remove_tree, walk
from probes.base import Probe, base_context, not_established
from probes.compare import compare_outputs
from probes.context import ProbeContext
from probes.sides import DRIVER, _read_run, run_side  # noqa: F401 - DRIVER and run_side are re-exported

SIDE_FUNCTIONS = ("reference", "candidate")


class ProbeFileError(ValueError):
    """A probe file that cannot be read as probes (syntax, missing functions, bad metadata)."""


def probe_names(path: Path, *, checks: bool = False) -> dict[str, dict[str, Any]]:
    """The probes a file defines and their metadata, read without executing it.

    Returns:
        name -> metadata (from the file's `PROBES` dict, where given). The name ''
        stands for the unsuffixed `reference`/`candidate` pair.

    Raises:
        ProbeFileError: syntax error, a `reference_X` without `candidate_X` (or the
            reverse), a `PROBES` that is not a literal dict, or no probe at all.

    With `checks=True`, the candidate-only `check_X` functions are returned instead.
    """
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ProbeFileError(f"{path}: {exc}") from None
    functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    metadata: dict[str, dict] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PROBES" for t in node.targets):
            try:
                metadata = ast.literal_eval(node.value)
            except ValueError:
                raise ProbeFileError(f"{path}: PROBES must be a literal dict") from None
            if not isinstance(metadata, dict) or not all(isinstance(v, dict) for v in metadata.values()):
                raise ProbeFileError(f"{path}: PROBES must map probe names to dicts")
    names: dict[str, dict] = {}
    if checks:
        for func in functions:
            match = re.fullmatch(r"check(?:_(\w+))?", func)
            if match:
                name = match.group(1) or ""
                key = name or Path(path).stem
                names[name] = dict(metadata.get(f"check_{key}", metadata.get(key, {})))
        return names
    for side in SIDE_FUNCTIONS:
        other = SIDE_FUNCTIONS[1 - SIDE_FUNCTIONS.index(side)]
        for func in functions:
            match = re.fullmatch(rf"{side}(?:_(\w+))?", func)
            if not match:
                continue
            name = match.group(1) or ""
            if (f"{other}_{name}" if name else other) not in functions:
                raise ProbeFileError(f"{path}: {func} has no matching {other}{'_' + name if name else ''}")
            names[name] = dict(metadata.get(name or Path(path).stem, {}))
    if not names and not any(re.fullmatch(r"check(_\w+)?", f) for f in functions):
        raise ProbeFileError(f"{path}: defines no probe (a pair of functions reference[_name], candidate[_name])")
    return names


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
        file = Path(path)
        meta = probe_names(file).get(name)
        if meta is None:
            raise ProbeFileError(f"{file}: no probe named {name!r}")
        meta.update({("id" if k == "property_id" else k): v for k, v in options.items()})
        return run_matched_probes(ctx, file, {name: meta}, rerun={name: {"path": str(file), "name": name, **options}})

    return probe


def probe_file_probe(path: str, names: list[str] | None = None) -> Probe:
    """Every differential probe of a file (or those in `names`), run together.

    Each side runs once for the whole file (one process imports torch or jax once),
    and every probe still gets its own inputs, outputs and result.
    """

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        file = Path(path)
        found = probe_names(file)
        chosen = {n: found[n] for n in (names if names is not None else sorted(found)) if n in found}
        missing = sorted(set(names or []) - set(found))
        if missing:
            raise ProbeFileError(f"{file}: no probe named {', '.join(missing)}")
        rerun = {n: {"path": str(file), "name": n} for n in chosen}
        return run_matched_probes(ctx, file, chosen, rerun=rerun)

    return probe


def _property(file: Path, name: str, meta: dict) -> Property:
    return Property(
        id=str(meta.get("id") or f"{file.stem}.{name}".rstrip(".")),
        kind="differential",
        level=int(meta.get("level", 1)),
        description=str(meta.get("description", "")),
    )


def _prepare(ctx: ProbeContext, file: Path, names: list[str]) -> Path:
    digest = hashlib.sha1(f"{file.resolve()}:{','.join(names)}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_.-]", "_", file.stem)[:40]
    root = ctx.workdir / "probes" / f"{slug}-{digest}"
    if root.exists():
        remove_tree(root)  # the sides wrote here: any depth
    for name in names:
        (root / _slot(name) / "inputs").mkdir(parents=True)
    shutil.copy(DRIVER, root / "driver.py")
    shutil.copy(file, root / "probe.py")
    return root


def _slot(name: str) -> str:
    return name or "_"


def _candidate_forbidden(report: dict, ctx: ProbeContext) -> list[dict]:
    root = ctx.roots("candidate")["candidate"] or ""
    return [
        a
        for a in report.get("forbidden_imports", [])
        if (a.get("importer") or {}).get("file", "").startswith(root.rstrip("/") + "/")
    ]


def run_matched_probes(
    ctx: ProbeContext, file: Path, probes: dict[str, dict], *, rerun: dict[str, dict]
) -> list[ProbeResult]:
    """Run matched differential probes of one file and decide each outcome (see the module docstring).

    Args:
        probes: probe name -> metadata.
        rerun: probe name -> options of `differential_probe` that re-run it alone.
    """
    names = list(probes)
    root = _prepare(ctx, file, names)
    sha1 = hashlib.sha1(file.read_bytes()).hexdigest()
    timeout = ctx.timeout_s + sum(float(m.get("timeout_s") or 0) for m in probes.values())
    wants_f64 = {n for n, m in probes.items() if m.get("noise", "float64") == "float64"}
    runs = []
    for name in names:
        slot = _slot(name)
        runs.append(
            {
                "out": f"{slot}/ref",
                "dtype": ctx.dtype,
                "make_inputs": True,
                "name": name,
                "inputs": f"{slot}/inputs",
            }
        )
        if name in wants_f64:
            runs.append(
                {
                    "out": f"{slot}/ref64",
                    "dtype": "float64",
                    "name": name,
                    "inputs": f"{slot}/inputs",
                }
            )
    reference = _reference_runs(ctx, root, file, names, runs, timeout)
    ok_names = [n for n in names if reference[(n, "ref")]["ok"]]
    cand_runs = [
        {"out": f"{_slot(n)}/cand", "dtype": ctx.dtype, "name": n, "inputs": f"{_slot(n)}/inputs"} for n in ok_names
    ]
    candidate = dict(
        zip(
            ok_names,
            run_side(ctx, root, "candidate", cand_runs, timeout_s=timeout, config_name="candidate")
            if cand_runs
            else [],
        )
    )
    results = []
    for name in names:
        meta = probes[name]
        context = base_context(ctx, "probes.differential:differential_probe", **rerun[name])
        context.update(
            {
                "probe_file": str(file),
                "probe_name": name,
                "dtype": ctx.dtype,
                "component": meta.get("component"),
                "uses": meta.get("uses", []),
                "probe_sha1": sha1,
            }
        )
        noise = reference.get((name, "ref64")) if name in wants_f64 else None
        if noise is None or not noise["ok"]:
            noise = reference.get((name, "ref2"))
            context["noise_source"] = "rerun"
        else:
            context["noise_source"] = "float64"
        results.append(
            _decide(
                ctx,
                _property(file, name, meta),
                meta,
                context,
                root / _slot(name),
                reference[(name, "ref")],
                noise,
                candidate.get(name),
            )
        )
    return results


REFERENCE_OUTS = ("ref", "ref64", "ref2")


def _tree_digest(root: Path | None) -> str:
    if root is None or not root.is_dir():
        return "-"
    h = hashlib.sha1()
    found = walk(root, skip_dirs={"__pycache__"})
    for entry in found.files():
        if "__pycache__" not in entry.rel.split("/"):
            h.update(f"{entry.rel}:{entry.st.st_size}:{entry.st.st_mtime_ns}".encode())
    h.update(f"incomplete:{found.incomplete}".encode())
    return h.hexdigest()


def _reference_runs(ctx: ProbeContext, root: Path, file: Path, names: list[str], runs: list[dict], timeout) -> dict:
    """The reference side's runs (and the inputs they drew), from `ctx.reference_cache` when it holds them.

    The reference does not depend on the candidate: a defect sweep or a later round
    re-uses it. The cache key covers the probe file, the names, seed, dtype, precision,
    device, and the original's and the assets' files.
    """
    key = hashlib.sha1(
        "|".join(
            [
                file.read_text(errors="replace"),
                ",".join(names),
                str(ctx.seed),
                ctx.dtype,
                ctx.precision,
                ctx.device,
                _tree_digest(ctx.source),
                _tree_digest(ctx.assets),
            ]
        ).encode()
    ).hexdigest()[:16]
    cached = ctx.reference_cache / key if ctx.reference_cache is not None else None
    if cached is None or not (cached / "done").is_file():
        reference = dict(
            zip(
                [(r["name"], r["out"].split("/")[-1]) for r in runs],
                run_side(ctx, root, "reference", runs, timeout_s=timeout, config_name="reference"),
            )
        )
        again_names = [
            n for n in names if reference[(n, "ref")]["ok"] and not reference.get((n, "ref64"), {}).get("ok")
        ]
        if again_names:
            again = [
                {
                    "out": f"{_slot(n)}/ref2",
                    "dtype": ctx.dtype,
                    "name": n,
                    "inputs": f"{_slot(n)}/inputs",
                }
                for n in again_names
            ]
            for name, result in zip(
                again_names,
                run_side(ctx, root, "reference", again, timeout_s=timeout, config_name="reference2"),
            ):
                reference[(name, "ref2")] = result
        if cached is None:
            return reference
        for name in names:
            for part in ("inputs", *REFERENCE_OUTS):
                if (root / _slot(name) / part).is_dir():
                    shutil.copytree(
                        root / _slot(name) / part, cached / _slot(name) / part, symlinks=True, dirs_exist_ok=True
                    )
        (cached / "done").write_text("ok")
        return reference
    reference = {}
    for name in names:
        for part in ("inputs", *REFERENCE_OUTS):
            if (cached / _slot(name) / part).is_dir():
                shutil.copytree(
                    cached / _slot(name) / part, root / _slot(name) / part, symlinks=True, dirs_exist_ok=True
                )
                if part != "inputs":
                    reference[(name, part)] = _read_run(root / _slot(name) / part, None, "(cached)", side="reference")
    return reference


def _decide(ctx, prop, meta, context, slot_dir, ref, noise, cand) -> ProbeResult:
    """The outcome of one probe from its reference, noise and candidate runs."""
    if not ref["ok"]:
        return not_established(
            prop,
            "the reference side failed: the probe does not fit the original",
            trace=ref["trace"],
            context=context,
        )
    context["inputs"] = _inputs_summary(slot_dir / "inputs")
    timing = {"reference_compute_s": ref["report"]["compute_s"]}
    if noise is None or not noise["ok"]:
        return not_established(
            prop,
            "the reference side failed on its second run",
            trace=(noise or {}).get("trace", ""),
            context=context,
        )
    if not cand["ok"]:
        forbidden = cand.get("error", {}).get("forbidden_imports", [])
        if cand["blame"] in ("candidate", "timeout"):
            return ProbeResult(
                property=prop,
                outcome=Outcome.VIOLATED,
                score=0.0,
                context=context,
                trace=cand["trace"],
                observations={
                    "message": f"the candidate crashed ({cand['blame']})",
                    "forbidden_imports": forbidden,
                },
            )
        return not_established(
            prop,
            f"the candidate side failed in {cand['blame']} code: the probe's calling "
            "convention may not fit the candidate",
            trace=cand["trace"],
            context=context,
        )
    timing["candidate_compute_s"] = cand["report"]["compute_s"]
    try:
        comparison = compare_outputs(ref["output"], cand["output"], noise["output"], meta.get("compare"))
    except ValueError as exc:
        return not_established(prop, f"bad probe metadata: {exc}", context=context)
    except (KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        # both manifests passed check_manifest; what still does not fit is the candidate's output
        return ProbeResult(
            property=prop,
            outcome=Outcome.VIOLATED,
            score=0.0,
            context=context,
            trace=f"{type(exc).__name__}: {exc}",
            observations={"message": "the candidate's output cannot be compared with the reference's"},
        )
    forbidden = _candidate_forbidden(cand["report"], ctx)
    problems = comparison.failing() + [
        f"candidate imports forbidden {a['module']} at {a['importer']['file']}:{a['importer']['line']}"
        for a in forbidden
    ]
    observations = {
        "outputs": {leaf.path or "<output>": leaf.as_dict() for leaf in comparison.leaves},
        "structure": comparison.structure,
        "noise_floor": comparison.noise_floor,
        "timing": timing,
    }
    if problems:
        observations["message"] = "; ".join(problems)[:2000]
    if not comparison.informative and not comparison.structure and not forbidden:
        return not_established(
            prop,
            "the probe returned nothing comparable (every output is beyond the reference's own reproducibility)",
            context=context,
        )
    uninformative = [leaf.path for leaf in comparison.leaves if not leaf.informative]
    if uninformative:
        observations["uninformative"] = uninformative
    return ProbeResult(
        property=prop,
        outcome=Outcome.VIOLATED if problems else Outcome.ESTABLISHED,
        score=comparison.score if not forbidden else 0.0,
        context=context,
        observations=observations,
    )


def _inputs_summary(inputs_dir: Path) -> dict[str, Any]:
    spec = inputs_dir / "inputs.json"
    if not spec.is_file():
        return {}
    meta = json.loads(spec.read_text())
    summary = {}
    arrays = np.load(inputs_dir / "inputs.npz") if (inputs_dir / "inputs.npz").is_file() else None
    for name, entry in meta.items():
        if entry["kind"] == "array" and arrays is not None:
            arr = arrays[entry["key"]]
            summary[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
        else:
            summary[name] = entry["value"]
    return summary
