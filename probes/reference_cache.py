"""The reference side's runs of a probe file, kept in and re-used from a reference cache.

The reference does not depend on the candidate: a defect sweep or a later round re-uses
its outputs (`ProbeContext.reference_cache`). Without a cache the reference just runs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ground.tree_digest import content_digest
from probes.context import ProbeContext
from probes.dependence import OUT as COUNTERFACTUAL_OUT
from probes.dependence import SKIP_OUT, counterfactual_runs, skip_runs
from probes.outcomes import INFRASTRUCTURE
from probes.probe_format import ProbeFile
from probes.sides import _read_run, run_side, slot

REFERENCE_OUTS = ("ref", "ref64", "ref2", COUNTERFACTUAL_OUT, SKIP_OUT)


def _tree_digest(root: Path | None) -> str | None:
    """`root`'s content (`ground.tree_digest`); "-" for no folder, None where it is too large to key."""
    if root is None or not root.is_dir():
        return "-"
    return content_digest(root)


RESEED_OFFSET = 1
"""A `"noise": "reseed"` probe's second reference run uses the seed plus this."""


def reseeded(probes: dict[str, dict]) -> frozenset[str]:
    """The probes whose noise floor is a second run with another seed (`"noise": "reseed"`)."""
    return frozenset(name for name, meta in probes.items() if meta.get("noise") == "reseed")


def reference_runs(
    ctx: ProbeContext,
    root: Path,
    file: ProbeFile,
    names: list[str],
    runs: list[dict],
    timeout,
    reseed: frozenset[str] = frozenset(),
    components: dict[str, str] | None = None,
) -> dict:
    """The reference side's runs (and the inputs they drew), from `ctx.reference_cache` when it holds them.

    Where there is no float64 run, the reference runs a second time at its working dtype:
    with the same seed, or with another one for the probes in `reseed` (their noise floor
    is then the spread of what they draw at random: dropout, sampling).

    For each probe in `components` (probe name -> its `component`) whose first run's trace says that
    it ran that component of the original, the reference runs again with the component's functions
    answering through stand-ins (`probes.dependence`), kept as `(name, "refcf")` and `(name, "refskip")`.

    The reference does not depend on the candidate: a defect sweep or a later round
    re-uses it. The cache key covers the probe file, the names, seed, dtype, precision,
    device, and the original's and the assets' content (`ground.tree_digest`: every file's
    bytes, so an edit that keeps sizes and times is a new key).
    """
    trees = [_tree_digest(ctx.source), _tree_digest(ctx.assets)]
    fields = [file.data.hex(), names, ctx.seed, ctx.dtype, ctx.precision, ctx.device, trees]
    key = hashlib.sha256(json.dumps(["reference-v3", *fields, sorted((components or {}).items())]).encode())
    key = key.hexdigest()[:16]
    # a tree too large to key (None): the reference runs, and nothing is kept by that key
    cached = ctx.reference_cache / key if ctx.reference_cache is not None and None not in trees else None
    if cached is None or not (cached / "done").is_file():
        reference = dict(
            zip(
                [(r["name"], r["out"].split("/")[-1]) for r in runs],
                run_side(ctx, root, "reference", runs, timeout_s=timeout, config_name="reference"),
                strict=True,  # one result per run, as run_side promises
            )
        )
        again_names = [
            n for n in names if reference[(n, "ref")]["ok"] and not reference.get((n, "ref64"), {}).get("ok")
        ]
        again = [
            {
                "out": f"{slot(n)}/ref2",
                "dtype": ctx.dtype,
                "name": n,
                "inputs": f"{slot(n)}/inputs",
                **({"seed": ctx.seed + RESEED_OFFSET} if n in reseed else {}),
            }
            for n in again_names
        ]
        # the second runs and the first counterfactual ones share a process (one import of the original)
        for plan in (counterfactual_runs, skip_runs):
            planned = again + plan(ctx.source, ctx.dtype, components or {}, reference)
            again = []
            if planned:
                config = "reference2" if plan is counterfactual_runs else "counterfactual"
                done = run_side(ctx, root, "reference", planned, timeout_s=timeout, config_name=config)
                for run, result in zip(planned, done, strict=True):
                    reference[(run["name"], run["out"].split("/")[-1])] = result
        # a run twin's own machinery failed is no answer of the original's: never kept for later candidates
        if cached is None or any(r.get("blame") == INFRASTRUCTURE for r in reference.values()):
            return reference
        for name in names:
            for part in ("inputs", *REFERENCE_OUTS):
                if (root / slot(name) / part).is_dir():
                    shutil.copytree(
                        root / slot(name) / part, cached / slot(name) / part, symlinks=True, dirs_exist_ok=True
                    )
        (cached / "done").write_text("ok")
        return reference
    reference = {}
    for name in names:
        for part in ("inputs", *REFERENCE_OUTS):
            if (cached / slot(name) / part).is_dir():
                shutil.copytree(cached / slot(name) / part, root / slot(name) / part, symlinks=True, dirs_exist_ok=True)
                if part != "inputs":
                    reference[(name, part)] = _read_run(root / slot(name) / part, None, "(cached)", side="reference")
    return reference
