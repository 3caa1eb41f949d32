"""Running one side of a probe in its sandbox and reading what the driver wrote.

The driver (`probes/driver.py`) is copied next to the probe file and run with the
side's interpreter; it writes, per run, `manifest.json` + `arrays.npz` or
`error.json`. These functions build its configuration, run it once for a list of
runs (one process imports torch or jax once), and read the results back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from probes.compare import SideOutput
from probes.context import ProbeContext, Side

DRIVER = Path(__file__).with_name("driver.py")


def candidate_roots(ctx: ProbeContext) -> list[str]:
    """The candidate's import roots under its task (declared or inferred), '' last."""
    from probes.layout import import_roots

    return import_roots(ctx.candidate, ctx.task.settings.candidate_import_roots)


def run_side(
    ctx: ProbeContext,
    root: Path,
    side: Side,
    runs: list[dict[str, Any]],
    *,
    name: str = "",
    timeout_s: float | None = None,
    config_name: str | None = None,
    mode: str | None = None,
) -> list[dict[str, Any]]:
    """Run one side of a probe in its sandbox, once per entry of `runs`, in one process.

    Args:
        runs: each {"out": subdirectory, "dtype": working dtype, "make_inputs": bool}.
        mode: what the driver runs ('imports', 'check'); defaults to the side's function.

    Returns:
        Per run: {"ok": True, "output": SideOutput, "report": manifest} on success,
        else {"ok": False, "blame": 'candidate'|'probe'|'unknown'|'timeout', "trace": ...}.
    """
    import sys

    roots = ctx.roots(side)
    root_inside = ctx.inside(side, root)
    own_root = roots["source"] if side == "reference" else roots["candidate"]
    sys_path = [own_root] if own_root else []
    if side == "candidate" and own_root:
        # The candidate's modules are imported the way its task says (probes.layout).
        sys_path = [f"{own_root.rstrip('/')}/{r}" if r else own_root for r in candidate_roots(ctx)]
    config = {
        "side": mode or side,
        "name": name,
        "probe_file": f"{root_inside}/probe.py",
        "inputs_dir": f"{root_inside}/inputs",
        "seed": ctx.seed,
        "device": ctx.device,
        "precision": ctx.precision,
        "roots": {k: roots[k] for k in ("source", "candidate", "assets")},
        "sys_path": sys_path,
        "cwd": own_root,
        "forbid": ctx.forbidden(side),
        "runs": [
            {
                "out_dir": f"{root_inside}/{run['out']}",
                "dtype": run["dtype"],
                "make_inputs": run.get("make_inputs", False),
                **({"name": run["name"]} if "name" in run else {}),
                **({"inputs_dir": f"{root_inside}/{run['inputs']}"} if "inputs" in run else {}),
            }
            for run in runs
        ],
    }
    if mode == "imports":
        from probes.layout import candidate_modules

        config["modules"] = candidate_modules(ctx.candidate, candidate_roots(ctx))
    for run in runs:
        if (root / run["out"]).exists():
            shutil.rmtree(root / run["out"])
    config_file = f"{config_name or runs[0]['out'].replace('/', '_')}.json"
    (root / config_file).write_text(json.dumps(config))
    result = ctx.sandbox(side).exec(
        [sys.executable, f"{root_inside}/driver.py", f"{root_inside}/{config_file}"],
        cwd=root_inside,
        timeout_s=timeout_s or ctx.timeout_s,
    )
    log = (result.stdout[-3000:] + "\n" + result.stderr[-6000:]).strip()
    return [_read_run(root / run["out"], result, log) for run in runs]


def _read_run(out_host: Path, result, log: str) -> dict[str, Any]:
    if (out_host / "error.json").is_file():
        error = json.loads((out_host / "error.json").read_text())
        return {
            "ok": False,
            "blame": error["blame"],
            "trace": error["trace"],
            "error": error,
            "log": log,
        }
    if not (out_host / "manifest.json").is_file():
        if result is not None and result.timed_out:
            return {
                "ok": False,
                "blame": "timeout",
                "trace": f"timed out after {result.duration_s:.0f}s\n{log}",
            }
        code = result.returncode if result is not None else "?"
        return {"ok": False, "blame": "unknown", "trace": f"exit {code}, no output\n{log}"}
    report = json.loads((out_host / "manifest.json").read_text())
    arrays = {}
    if (out_host / "arrays.npz").is_file():
        with np.load(out_host / "arrays.npz") as data:
            arrays = {k: np.array(data[k]) for k in data.files}
    return {
        "ok": True,
        "output": SideOutput(report.get("outputs", {}), arrays),
        "report": report,
        "log": log,
    }
