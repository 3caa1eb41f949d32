"""Runs one side of a probe inside the sandbox. Standalone: imports nothing from twin.

Invoked as `python driver.py CONFIG.json`. The config says which side to run
(`reference`, `candidate` or `imports`), where the probe file, the source, the
candidate and the assets are (paths as seen inside the sandbox), the seed, the
working dtype, the device and the precision policy. It writes into `out_dir`:

- `manifest.json`: the structure of the named outputs (names, containers and their
  types, shapes, dtypes, JSON values) plus timing and forbidden-import attempts, and on
  a reference run what its helpers beside this file say (`reference_trace`, `counterfactual`);
- `arrays.npz`: the arrays, keyed by their index in the manifest;
- `error.json` instead, when the side crashed: the traceback and its frames, from which
  twin decides the blame itself (`probes.outcomes`: the candidate's code runs in this
  process and can write here too). Before the first run, `STARTED` goes to stdout.

The reference side also draws the inputs (when the probe defines `inputs`) and saves
them to `inputs_dir`, from where the candidate side loads the very same values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np

MAX_DEPTH = 12
STARTED = "twin-probe-driver-started-5d0c"
FORBIDDEN_ATTEMPTS: list[dict] = []


class ForbiddenImportFinder:
    """Refuses (and records) every import of a forbidden top-level package."""

    def __init__(self, forbidden: list[str], roots: dict[str, str]) -> None:
        self.forbidden = set(forbidden)
        self.roots = roots

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.forbidden:
            return None
        importer = None
        for frame in reversed(traceback.extract_stack()[:-1]):
            if "importlib" in frame.filename or frame.filename == __file__:
                continue
            importer = {"file": frame.filename, "line": frame.lineno}
            break
        FORBIDDEN_ATTEMPTS.append({"module": name, "importer": importer})
        raise ModuleNotFoundError(f"No module named '{name}' (absent on the candidate side)", name=name)


def _inside(path: str, root: str | None) -> bool:
    if not root:
        return False
    root = os.path.realpath(root)
    path = os.path.realpath(path)
    return path == root or path.startswith(root.rstrip("/") + "/")


def frames_of(exc: BaseException) -> list[dict]:
    """The traceback's frames (file, line, name): what the host decides the blame from."""
    return [{"file": f.filename, "line": f.lineno, "name": f.name} for f in traceback.extract_tb(exc.__traceback__)]


# ---- output encoding ------------------------------------------------------------------------
def _to_numpy(value):
    """An array-like from numpy, torch or jax as (numpy array, dtype name), else None."""
    module = type(value).__module__ or ""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic) and not isinstance(value, (np.str_, np.bytes_)):
        arr = np.asarray(value)
        name = str(arr.dtype)
    elif module.startswith("torch") and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        name = str(tensor.dtype).removeprefix("torch.")
        if name in ("bfloat16", "float16"):
            tensor = tensor.float()
        arr = tensor.numpy()
    elif module.startswith(("jax", "jaxlib")) and hasattr(value, "shape") and hasattr(value, "dtype"):
        arr = np.asarray(value)
        name = str(arr.dtype)
    else:
        return None
    if arr.dtype.kind == "V" or name == "bfloat16":
        arr = arr.astype(np.float32)
    return arr, name


def _numeric_array(value):
    """A non-empty list of plain numbers (possibly nested, rectangular) as an array, else None."""
    if not value:
        return None
    flat = value
    while isinstance(flat, (list, tuple)) and flat and isinstance(flat[0], (list, tuple)):
        flat = flat[0]
    if not isinstance(flat, (list, tuple)) or not flat:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in flat):
        return None
    try:
        arr = np.asarray(value)
    except ValueError:
        return None
    return arr if arr.dtype.kind in "iuf" else None


def _join(path: str, key) -> str:
    return f"{path}/{key}" if path else str(key)


def encode(value, path: str, manifest: dict, arrays: dict, depth: int = 0) -> None:
    """Flatten a nested output into `manifest[path]` entries and `arrays`."""
    if depth > MAX_DEPTH:
        manifest[path] = {"kind": "value", "value": repr(value)[:200]}
        return
    converted = _to_numpy(value)
    if converted is not None:
        arr, dtype = converted
        key = f"a{len(arrays)}"
        arrays[key] = arr
        manifest[path] = {"kind": "array", "shape": list(arr.shape), "dtype": dtype, "key": key}
        return
    if value is None or isinstance(value, (bool, int, float, str)):
        finite = not isinstance(value, float) or np.isfinite(value)
        manifest[path] = {"kind": "value", "value": value if finite else repr(value)}
        return
    typename = type(value).__qualname__
    if isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "__getitem__")):
        keys = [str(k) for k in value.keys()]
        manifest[path] = {"kind": "mapping", "type": typename, "keys": keys}
        for k in value.keys():
            encode(value[k], _join(path, k), manifest, arrays, depth + 1)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        manifest[path] = {"kind": "object", "type": typename, "keys": list(value._fields)}
        for field in value._fields:
            encode(getattr(value, field), _join(path, field), manifest, arrays, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
        manifest[path] = {"kind": "object", "type": typename, "keys": names}
        for field in names:
            encode(getattr(value, field), _join(path, field), manifest, arrays, depth + 1)
    elif isinstance(value, (list, tuple)) and _numeric_array(value) is not None:
        # A list of numbers (or a rectangular nested one) is one array: compared as a whole.
        arr = _numeric_array(value)
        key = f"a{len(arrays)}"
        arrays[key] = arr
        manifest[path] = {"kind": "array", "shape": list(arr.shape), "dtype": str(arr.dtype), "key": key}
    elif isinstance(value, (list, tuple)):
        manifest[path] = {"kind": "sequence", "type": typename, "length": len(value)}
        for i, item in enumerate(value):
            encode(item, _join(path, i), manifest, arrays, depth + 1)
    else:
        manifest[path] = {"kind": "value", "value": repr(value)[:200], "type": typename}


def load_inputs(inputs_dir: Path) -> dict:
    """The inputs saved by the reference side, as a nested dict of arrays and values."""
    spec = inputs_dir / "inputs.json"
    if not spec.is_file():
        return {}
    meta = json.loads(spec.read_text())
    arrays = np.load(inputs_dir / "inputs.npz") if (inputs_dir / "inputs.npz").is_file() else {}
    out: dict = {}
    for name, entry in meta.items():
        out[name] = np.array(arrays[entry["key"]]) if entry["kind"] == "array" else entry["value"]
    return out


def save_inputs(inputs: dict, inputs_dir: Path) -> None:
    inputs_dir.mkdir(parents=True, exist_ok=True)
    meta, arrays = {}, {}
    for name, value in inputs.items():
        converted = _to_numpy(value)
        if converted is not None:
            key = f"i{len(arrays)}"
            arrays[key] = converted[0]
            meta[name] = {"kind": "array", "key": key}
        else:
            meta[name] = {"kind": "value", "value": value}
    np.savez(inputs_dir / "inputs.npz", **arrays)
    (inputs_dir / "inputs.json").write_text(json.dumps(meta))


# ---- sides ------------------------------------------------------------------------------------
def _configure_torch(torch, seed: int, dtype: str, precision: str, device: str = "cpu") -> None:
    torch.manual_seed(seed)
    if device == "gpu" and torch.cuda.is_available():
        torch.set_default_device("cuda")
    if precision != "default":
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.set_default_dtype(torch.float64 if dtype == "float64" else torch.float32)


class TorchConfigurator:
    """Applies seed, dtype and precision to torch when (and only if) the probe imports it.

    Importing torch costs seconds; a reference side that does not need it should not pay.
    """

    def __init__(self) -> None:
        self.settings: tuple[int, str, str] | None = None

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.settings is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, configurator = spec.loader, self

        class ConfiguringLoader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _configure_torch(module, *configurator.settings)

            def __getattr__(self, attr):
                return getattr(loader, attr)

        spec.loader = ConfiguringLoader()
        return spec


TORCH_CONFIGURATOR = TorchConfigurator()


def _seed_everything(seed: int, side: str, dtype: str, precision: str, device: str = "cpu") -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    if side != "reference" or "torch" in FORBIDDEN_SET:
        return
    TORCH_CONFIGURATOR.settings = (seed, dtype, precision, device)
    if "torch" in sys.modules:
        _configure_torch(sys.modules["torch"], seed, dtype, precision, device)
    elif TORCH_CONFIGURATOR not in sys.meta_path:
        sys.meta_path.insert(0, TORCH_CONFIGURATOR)


def _load(name: str, path):
    """The file at `path` run as module `name`, registered in `sys.modules` as an imported module would be."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_side(config: dict, out_dir: Path) -> dict:
    """Run `inputs` (reference side, when asked) and the side's function; returns the manifest."""
    roots = {k: Path(v) if v else None for k, v in config["roots"].items()}
    env = SimpleNamespace(
        **{key: config[key] for key in ("seed", "dtype", "device", "precision")},
        **{key: roots.get(key) for key in ("source", "candidate", "assets")},
        scratch=out_dir / "scratch",
        rng=np.random.default_rng(config["seed"]),
        inputs={},
    )
    env.scratch.mkdir(parents=True, exist_ok=True)
    module = _load("twin_probe_file", config["probe_file"])
    name = config["name"]
    inputs_dir = Path(config["inputs_dir"])
    suffix = "" if name == "" else f"_{name}"
    if config.get("make_inputs"):
        make = getattr(module, f"inputs{suffix}", None)
        if make is not None:
            save_inputs(dict(make(env)), inputs_dir)
    env.inputs = load_inputs(inputs_dir)
    func = getattr(module, f"{config['side']}{suffix}", None)
    if func is None:
        raise AttributeError(f"probe file defines no function {config['side']}{suffix}")
    with contextlib.ExitStack() as around:
        helpers = [around.enter_context(helper) for helper in _reference_helpers(config)]
        start = time.perf_counter()
        outputs = func(env)
        compute_s = time.perf_counter() - start
    manifest: dict = {}
    arrays: dict = {}
    encode(outputs, "", manifest, arrays)
    np.savez(out_dir / "arrays.npz", **arrays)
    result = {"outputs": manifest, "compute_s": compute_s}
    for helper in helpers:
        result.update(helper.result())
    return result


def _reference_helpers(config: dict) -> list:
    """What wraps a reference run's function where the run asks, from twin's files beside this one loaded by path (a
    grader's copy has none): the trace of what it ran (`reference_trace.py`), stand-ins (`counterfactual.py`)."""
    if config["side"] != "reference" or not config["roots"].get("source"):
        return []
    helpers = []
    for name in ("reference_trace", "counterfactual"):
        path = Path(__file__).with_name(f"{name}.py")
        if path.is_file():
            helpers.append(_load(f"twin_{name}", path).for_run(config))
    return [helper for helper in helpers if helper is not None]


def _innermost_candidate_file(frames: list[dict], root: str) -> str | None:
    """The candidate file (relative) where a failure arose: a forbidden import's importer, else the innermost frame."""
    for attempt in reversed(FORBIDDEN_ATTEMPTS):
        importer = (attempt.get("importer") or {}).get("file", "")
        if _inside(importer, root):
            return os.path.relpath(os.path.realpath(importer), os.path.realpath(root))
    for frame in reversed(frames):
        if _inside(frame["file"], root):
            return os.path.relpath(os.path.realpath(frame["file"]), os.path.realpath(root))
    return None


def run_imports(config: dict) -> dict:
    """Import every module of the candidate; record each failure with its frames."""
    root = Path(config["roots"]["candidate"])
    modules = {}
    # The host names every module the way the task imports it (probes.layout).
    for name, rel_text in config["modules"].items():
        rel = Path(rel_text)
        start = time.perf_counter()
        try:
            importlib.import_module(name)
            modules[name] = {"ok": True, "file": str(rel), "seconds": time.perf_counter() - start}
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a script counts too
            frames = frames_of(exc)
            modules[name] = {
                "ok": False,
                "file": str(rel),
                "where": _innermost_candidate_file(frames, str(root)) or str(rel),
                "error": f"{type(exc).__name__}: {exc}",
                "trace": "".join(traceback.format_exception(exc))[-4000:],
            }
    return {"modules": modules}


FORBIDDEN_SET: set[str] = set()


def run_one(config: dict) -> int:
    """One run of one side; writes manifest.json or error.json into its out_dir."""
    out_dir = Path(config["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    del FORBIDDEN_ATTEMPTS[:]
    started = time.perf_counter()
    try:
        _seed_everything(config["seed"], config["side"], config["dtype"], config["precision"], config["device"])
        if config["side"] == "imports":
            result = run_imports(config)
        else:
            result = run_side(config, out_dir)
    except BaseException as exc:  # noqa: BLE001 - every failure is data for the host
        error = {
            "type": type(exc).__name__,
            "message": str(exc)[:2000],
            "frames": frames_of(exc)[-30:],
            "trace": "".join(traceback.format_exception(exc))[-8000:],
            "forbidden_imports": list(FORBIDDEN_ATTEMPTS),
        }
        (out_dir / "error.json").write_text(json.dumps(error, default=str))
        return 3
    result["forbidden_imports"] = list(FORBIDDEN_ATTEMPTS)
    result["wall_s"] = time.perf_counter() - started
    (out_dir / "manifest.json").write_text(json.dumps(result, default=str))
    return 0


def main(config_path: str) -> int:
    """Run every run the config lists (e.g. the reference at float32, then float64) in one process."""
    config = json.loads(Path(config_path).read_text())
    FORBIDDEN_SET.update(config.get("forbid", []))
    if FORBIDDEN_SET:
        sys.meta_path.insert(0, ForbiddenImportFinder(sorted(FORBIDDEN_SET), config["roots"]))
    for entry in reversed(config.get("sys_path", [])):
        sys.path.insert(0, entry)
    if config.get("cwd"):
        os.chdir(config["cwd"])
    status = 0
    os.write(1, f"{STARTED}\n".encode())  # unbuffered: no later exit can take it back
    for run in config.get("runs") or [{}]:
        status = max(status, run_one({**config, **run}))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
