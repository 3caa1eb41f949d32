"""Python API side of a differential session: the same calls on one side's package.

The side's root is put first on `sys.path`. Each request is a list of calls
`{"call": "module:attr.path", "args": [...], "kwargs": {...}}` run in a forked
child (so one request cannot change the state the next one sees); the answer
is, per call, its encoded result or the type and message of what it raised.
An argument `{"$ref": i}` passes the result of call `i` of the same request.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _svc_common import BLOCKER, load_config, serve  # noqa: E402

MAX_DEPTH = 8


def encode(value, depth: int = 0):
    """A JSON form of a result that keeps types apart (a tuple is not a list, 1 is not 1.0)."""
    if depth > MAX_DEPTH:
        return {"$repr": "...", "$type": type(value).__name__}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"$int": str(value)}
    if isinstance(value, float):
        return {"$float": repr(value) if math.isfinite(value) else str(value)}
    if isinstance(value, (list, tuple)):
        return {"$" + type(value).__name__: [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"$set": sorted(json.dumps(encode(v, depth + 1), sort_keys=True) for v in value)}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return {"$repr": repr(value), "$type": type(value).__name__}


def resolve(target: str):
    module_name, _, attr_path = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in filter(None, attr_path.split(".")):
        obj = getattr(obj, part)
    return obj


def run_calls(calls: list[dict]) -> list[dict]:
    results, values = [], []
    for call in calls:

        def arg(value):
            return values[value["$ref"]] if isinstance(value, dict) and "$ref" in value else value

        try:
            func = resolve(call["call"])
            value = func(
                *[arg(a) for a in call.get("args", [])],
                **{k: arg(v) for k, v in call.get("kwargs", {}).items()},
            )
            values.append(value)
            results.append({"value": encode(value)})
        except Exception as exc:  # the behaviour under test, not a driver failure
            values.append(None)
            results.append({"raised": type(exc).__name__, "message": str(exc)})
    return results


def run_isolated(calls: list[dict]) -> dict:
    if not hasattr(os, "fork"):
        return {"calls": run_calls(calls)}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            payload = json.dumps({"calls": run_calls(calls)})
        except BaseException as exc:  # noqa: BLE001 - the child must always answer
            payload = json.dumps({"driver_error": f"{type(exc).__name__}: {exc}"})
        with os.fdopen(write_fd, "w") as fh:
            fh.write(payload)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        data = fh.read()
    _pid, status = os.waitpid(pid, 0)
    if not data:
        return {"crashed": True, "status": status}
    return json.loads(data)


def main() -> int:
    config = load_config()

    def setup():
        sys.path.insert(0, config["root"])
        if config.get("forbidden") and config.get("block_imports", True):
            exec(BLOCKER.format(forbidden=sorted(config["forbidden"])), {})
        for name in config.get("preload", []):
            importlib.import_module(name)
        return config

    return serve(config, setup, lambda _state, req: run_isolated(req["calls"]))


if __name__ == "__main__":
    sys.exit(main())
