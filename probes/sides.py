"""Running one side of a probe in its sandbox and reading what the driver wrote.

The driver (`probes/driver.py`) is run with the side's interpreter; it writes, per
run, `manifest.json` + `arrays.npz` or `error.json`. These functions build its
configuration, run it once for a list of runs (one process imports torch or jax
once), and read the results back.

Each side works in its own directories (`ProbeContext.side_work` / `side_given`):
the probe file, the driver, the configuration and the inputs it did not draw itself
are handed over read-only; it writes only its own work directory. After the run,
twin copies each run's known output files, regular files only and within size caps,
into the shared layout directory (`root`) that only the harness uses. A hostile or
broken output is that run's failure, blamed on the side that produced it; it never
takes down the other runs of the same file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ground.agent_tree import remove_tree
from ground.sandboxes.presentation import refused_over_caps
from ground.untrusted_io import AgentFileError, read_regular, write_atomic
from probes.compare import SideOutput
from probes.context import ProbeContext, Side
from probes.driver import STARTED
from probes.layout import candidate_modules, import_roots
from probes.outcomes import INFRASTRUCTURE, ended_blame, record_blame

DRIVER = Path(__file__).with_name("driver.py")
OUTPUT_FILES = ("manifest.json", "error.json", "arrays.npz")
INPUT_FILES = ("inputs.json", "inputs.npz")
JSON_CAP = 16 * 1024 * 1024
ARRAYS_CAP = 512 * 1024 * 1024
MAX_DEPTH = 64


class HostileOutput(ValueError):
    """An output file that is not a regular file, too large, too deep or not parseable."""


def slot(name: str) -> str:
    """The directory of probe `name` under a probe file's root ('_' for the unsuffixed pair)."""
    return name or "_"


def candidate_roots(ctx: ProbeContext) -> list[str]:
    """The candidate's import roots under its task (declared or inferred), '' last."""
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
        root: the probe's layout directory on the host (under `ctx.workdir`): the harness
            reads `driver.py`, `probe.py` and the inputs there and finds each run's
            outputs at `root / run["out"]` afterwards.
        runs: each {"out": subdirectory, "dtype": working dtype, "make_inputs": bool}.
        mode: what the driver runs ('imports', 'check'); defaults to the side's function.

    Returns:
        Per run: {"ok": True, "output": SideOutput, "report": manifest} on success,
        else {"ok": False, "blame": ..., "trace": ...}, blamed by `probes.outcomes`
        (`record_blame` from an error record's frames, `ended_blame` when the run left
        no record; then "status" says how the process ended).
        A command the sandbox refused because the side's read-only root grew over the
        snapshot caps fails every run, blamed on the candidate on the candidate side.
        A side whose capped work directory was unmounted under it (twin's own failure) fails
        every run, blamed on `INFRASTRUCTURE`: never evidence about either side's code.
    """
    import sys

    rel = root.resolve().relative_to(ctx.workdir.resolve())
    work, given = ctx.side_work(side) / rel, ctx.side_given(side) / rel
    for path in (work, given):
        if path.exists():
            remove_tree(path)
    given.mkdir(parents=True)
    made = {run["inputs"] for run in runs if run.get("make_inputs") and "inputs" in run}
    for entry in root.iterdir():
        if entry.is_file() and not entry.is_symlink():
            shutil.copyfile(entry, given / entry.name)
    for run in runs:
        if "inputs" in run and run["inputs"] not in made:
            _hand_over(root / run["inputs"], given / run["inputs"])
        if (root / run["out"]).exists():
            remove_tree(root / run["out"])
    _readable(given)
    work.mkdir(parents=True)
    roots = ctx.roots(side)
    work_inside, given_inside = ctx.inside(side, work), ctx.inside(side, given)
    own_root = roots["source"] if side == "reference" else roots["candidate"]
    sys_path = [own_root] if own_root else []
    if side == "candidate" and own_root:
        # The candidate's modules are imported the way its task says (probes.layout).
        sys_path = [f"{own_root.rstrip('/')}/{r}" if r else own_root for r in candidate_roots(ctx)]
    # inputs this very call draws are read back from its own work directory by its later runs
    config = {
        "side": mode or side,
        "name": name,
        "probe_file": f"{given_inside}/probe.py",
        "inputs_dir": f"{given_inside}/inputs",
        "seed": ctx.seed,
        "device": ctx.device,
        "precision": ctx.precision,
        "roots": {k: roots[k] for k in ("source", "candidate", "assets")},
        "sys_path": sys_path,
        "cwd": own_root,
        "forbid": ctx.forbidden(side),
        "runs": [
            {
                "out_dir": f"{work_inside}/{run['out']}",
                "dtype": run["dtype"],
                "make_inputs": run.get("make_inputs", False),
                **({"name": run["name"]} if "name" in run else {}),
                **({"seed": int(run["seed"])} if "seed" in run else {}),  # a reseeded noise run
                # the components whose running the reference records (`probes/reference_trace.py`)
                **({"trace_components": list(run["trace_components"])} if "trace_components" in run else {}),
                # the component whose functions answer through stand-ins (`probes/counterfactual.py`)
                **({"counterfactual": dict(run["counterfactual"])} if "counterfactual" in run else {}),
                **(
                    {
                        "inputs_dir": f"{work_inside if run['inputs'] in made else given_inside}"
                        f"/{run['inputs']}"
                    }
                    if "inputs" in run
                    else {}
                ),
            }
            for run in runs
        ],
    }
    if mode == "imports":
        config["modules"] = candidate_modules(ctx.candidate, candidate_roots(ctx))
    config_file = f"{config_name or runs[0]['out'].replace('/', '_')}.json"
    (given / config_file).write_text(json.dumps(config))
    (given / config_file).chmod(0o644)
    sandbox = ctx.sandbox(side)
    result = sandbox.exec(
        [sys.executable, f"{given_inside}/driver.py", f"{given_inside}/{config_file}"],
        cwd=work_inside,
        timeout_s=ctx.side_limit(timeout_s or ctx.timeout_s),
    )
    lost = sandbox.lost_roots()
    if lost:  # the side wrote where twin no longer reads: whatever is (not) there says nothing of its code
        trace = f"the side's work directory was lost under it: {'; '.join(lost)}"
        return [{"ok": False, "blame": INFRASTRUCTURE, "trace": trace} for _ in runs]
    refused = refused_over_caps(result)
    if refused is not None:  # nothing ran: the side's own root (the candidate's tree) is over the caps
        blame = "candidate" if side == "candidate" else "unknown"
        return [{"ok": False, "blame": blame, "trace": f"the side did not run: {refused}"} for _ in runs]
    log = (result.stdout.replace(f"{STARTED}\n", "", 1)[-3000:] + "\n" + result.stderr[-6000:]).strip()
    if result.exceeded:
        log = f"{result.exceeded}\n{log}"
    known = {"candidate_root": roots["candidate"] if side == "candidate" else None, "probe_file": config["probe_file"]}
    read = []
    for run in runs:
        try:
            _take_back(work / run["out"], root / run["out"], OUTPUT_FILES)
            if run.get("make_inputs") and "inputs" in run:
                _take_back(work / run["inputs"], root / run["inputs"], INPUT_FILES)
        except HostileOutput as exc:
            read.append(_hostile(side, str(exc), log))
            continue
        read.append(_read_run(root / run["out"], result, log, side=side, known=known))
    return read


def _hand_over(src: Path, dst: Path) -> None:
    """Copy the inputs a side is given (regular files only) into its read-only directory."""
    dst.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        for name in INPUT_FILES:
            if (src / name).is_file() and not (src / name).is_symlink():
                shutil.copyfile(src / name, dst / name)


def _readable(tree: Path) -> None:
    """Make what a side is given readable (and only readable) to the sandbox uid."""
    for dirpath, _dirs, filenames in os.walk(tree):
        os.chmod(dirpath, 0o755)
        for filename in filenames:
            os.chmod(os.path.join(dirpath, filename), 0o644)


def _take_back(src: Path, dst: Path, names: tuple[str, ...]) -> None:
    """Copy a side's known output files into the harness's layout directory, defensively.

    Raises:
        HostileOutput: an output is a link, a special file, or over its size cap.
    """
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise HostileOutput(f"output directory {src.name} is not a directory")
    dst.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not os.path.lexists(src / name):
            continue
        cap = ARRAYS_CAP if name.endswith(".npz") else JSON_CAP
        try:
            data, _size = read_regular(src / name, cap, refuse_over=True)
        except AgentFileError as exc:
            raise HostileOutput(f"output {name} cannot be read safely: {str(exc).split(': ', 1)[-1]}") from None
        write_atomic(dst, name, data)


def _hostile(side: Side, why: str, log: str) -> dict[str, Any]:
    """A run whose output could not be read: the fault of the side that wrote it."""
    blame = "candidate" if side == "candidate" else "probe"
    return {"ok": False, "blame": blame, "trace": f"unusable output: {why}\n{log}"}


def load_json(path: Path) -> Any:
    """Parse a JSON output within the size and depth caps.

    Raises:
        HostileOutput: too large, too deeply nested, or not JSON.
    """
    if path.stat().st_size > JSON_CAP:
        raise HostileOutput(f"{path.name} is over {JSON_CAP} bytes")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:
        raise HostileOutput(f"{path.name} is not valid JSON: {str(exc)[:200]}") from None
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise HostileOutput(f"{path.name} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return data


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """Load an `.npz` output without pickles and within the size cap (uncompressed).

    Raises:
        HostileOutput: too large once uncompressed, or not a readable archive.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            total = sum(info.file_size for info in archive.infolist())
        if total > ARRAYS_CAP:
            raise HostileOutput(f"{path.name} unpacks to {total} bytes, over {ARRAYS_CAP}")
        with np.load(path, allow_pickle=False) as data:
            return {k: np.array(data[k]) for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise HostileOutput(f"{path.name} is not a readable array archive: {exc}") from None


def check_manifest(report: Any, arrays: dict[str, np.ndarray]) -> None:
    """Check that a manifest has the shape the driver writes, so that comparing it cannot crash.

    Raises:
        HostileOutput: a field of the wrong type, or an array entry with no array.
    """
    if not isinstance(report, dict):
        raise HostileOutput("manifest.json is not an object")
    compute = report.get("compute_s", 0.0)
    if "modules" not in report and not isinstance(report.get("compute_s"), (int, float)):
        raise HostileOutput("manifest.json has no compute time")
    if isinstance(compute, bool) or not isinstance(compute, (int, float)):
        raise HostileOutput("manifest.json: compute_s is not a number")
    outputs = report.get("outputs", {})
    if not isinstance(outputs, dict):
        raise HostileOutput("manifest.json: outputs is not an object")
    for path, entry in outputs.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str):
            raise HostileOutput(f"manifest.json: output {path[:80]!r} has no kind")
        if entry["kind"] == "array" and (
            entry.get("key") not in arrays
            or not isinstance(entry.get("shape"), list)
            or not all(isinstance(n, int) for n in entry["shape"])
        ):
            raise HostileOutput(f"manifest.json: output {path[:80]!r} names no array")
        keys = entry.get("keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise HostileOutput(f"manifest.json: output {path[:80]!r} has malformed keys")
        if isinstance(entry.get("value"), (dict, list)):
            raise HostileOutput(f"manifest.json: output {path[:80]!r} is not a leaf value")
    modules = report.get("modules", {})
    if not isinstance(modules, dict) or not all(
        isinstance(m, dict) and isinstance(m.get("ok"), bool) for m in modules.values()
    ):
        raise HostileOutput("manifest.json: modules is malformed")
    attempts = report.get("forbidden_imports", [])
    if not isinstance(attempts, list) or not all(
        isinstance(a, dict) and isinstance(a.get("importer") or {}, dict) for a in attempts
    ):
        raise HostileOutput("manifest.json: forbidden_imports is malformed")


def _read_run(
    out_host: Path, result, log: str, *, side: Side = "reference", known: dict[str, str | None] | None = None
) -> dict[str, Any]:
    try:
        return _parse_run(out_host, result, log, known or {"candidate_root": None, "probe_file": None})
    except HostileOutput as exc:
        return _hostile(side, str(exc), log)


def _parse_run(out_host: Path, result, log: str, known: dict[str, str | None]) -> dict[str, Any]:
    if (out_host / "error.json").is_file() and (out_host / "manifest.json").is_file():
        raise HostileOutput("the run left both its outputs and an error record (the driver writes one)")
    if (out_host / "error.json").is_file():
        error = load_json(out_host / "error.json")
        if not isinstance(error, dict):
            raise HostileOutput("error.json is not an object")
        return {
            "ok": False,
            "blame": record_blame(error, **known),
            "trace": str(error.get("trace", ""))[:20000],
            "error": error,
            "log": log,
        }
    if not (out_host / "manifest.json").is_file():
        blame, status = ended_blame(result)
        return {
            "ok": False,
            "blame": blame,
            "status": status,
            "trace": f"{status}, without its outputs or an error record\n{log}",
        }
    report = load_json(out_host / "manifest.json")
    arrays = {}
    if (out_host / "arrays.npz").is_file():
        arrays = load_arrays(out_host / "arrays.npz")
    check_manifest(report, arrays)
    return {
        "ok": True,
        "output": SideOutput(report.get("outputs", {}), arrays),
        "report": report,
        "log": log,
    }
