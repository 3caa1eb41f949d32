"""Plumbing shared by the service drivers. Standalone: imports nothing from twin.

A driver serves one side of a differential session. It reads one JSON request per
line from the `in` FIFO and answers with one JSON line on the `out` FIFO, until it
reads `{"op": "quit"}` or the FIFO closes. Drivers are copied next to their FIFOs
in the probe work directory, so they run wherever that directory is mounted.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import traceback

BLOCKER = """
import sys
FORBIDDEN = {forbidden!r}
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            message = f"No module named {{name!r}} (absent on the candidate side)"
            raise ModuleNotFoundError(message, name=name)
        return None
sys.meta_path.insert(0, _Refuse())
"""


def encode_bytes(data: bytes) -> dict:
    """Bytes as JSON: text when it is UTF-8, base64 otherwise."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def decode_bytes(value) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    if "base64" in value:
        return base64.b64decode(value["base64"])
    return value.get("text", "").encode("utf-8")


def blocker_dir(work: str, forbidden: list[str]) -> str | None:
    """A directory with a `sitecustomize.py` refusing `forbidden` imports (unsandboxed runs only).

    Inside bwrap the forbidden packages are physically absent and this is not needed;
    without a sandbox it keeps independence observable in child processes.
    """
    if not forbidden:
        return None
    path = os.path.join(work, "blocker")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(BLOCKER.format(forbidden=sorted(forbidden)))
    return path


def child_env(config: dict) -> dict:
    """Environment of processes the driver starts: its own plus the side's settings."""
    env = dict(os.environ)
    env.update(config.get("env", {}))
    block = blocker_dir(config["work"], config.get("forbidden", []))
    if block:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (block, env.get("PYTHONPATH", "")) if p)
    return env


def fill(value, config: dict):
    """Replace `{python}`, `{root}` (and `{port}` where given) placeholders in strings and lists."""
    if isinstance(value, list):
        return [fill(v, config) for v in value]
    if isinstance(value, str):
        for key in ("python", "root", "port", "work"):
            if key in config:
                value = value.replace("{" + key + "}", str(config[key]))
        return value
    return value


def serve(config: dict, setup, handle) -> int:
    """Answer requests from the `in` FIFO on the `out` FIFO until told to quit.

    The first line written is `{"ready": ...}` (what `setup()` returned) or
    `{"startup_error": traceback}`, so the other end never waits on a driver that
    could not start.
    """
    with (
        open(config["fifo_out"], "w", encoding="utf-8") as out,
        open(config["fifo_in"], encoding="utf-8") as inp,
    ):
        try:
            state = setup()
        except Exception:
            out.write(json.dumps({"startup_error": traceback.format_exc(limit=8)}) + "\n")
            out.flush()
            return 1
        out.write(json.dumps({"ready": True}) + "\n")
        out.flush()
        for line in inp:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("op") == "quit":
                break
            try:
                reply = handle(state, request["input"])
            except Exception:
                reply = {"driver_error": traceback.format_exc(limit=8)}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    return 0


def load_config() -> dict:
    with open(sys.argv[1], encoding="utf-8") as fh:
        config = json.load(fh)
    config.setdefault("python", sys.executable)
    return config
