"""Process side of a differential session: runs one command per request in a fresh directory.

Each request gives argv, stdin, files to create and environment variables; the
answer is the exit status, stdout, stderr and every file in the directory after
the run (created, changed or left behind), plus the seeded files that were removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _svc_common import child_env, decode_bytes, encode_bytes, fill, load_config, serve  # noqa: E402

MAX_FILE_BYTES = 1_000_000


def snapshot(root: str) -> dict[str, bytes]:
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                files[rel] = b"-> " + os.readlink(path).encode()
                continue
            with open(path, "rb") as fh:
                files[rel] = fh.read(MAX_FILE_BYTES)
    return files


def run_one(config: dict, req: dict) -> dict:
    scratch = tempfile.mkdtemp(prefix="case-", dir=config["work"])
    try:
        seeded = {}
        for rel, content in req.get("files", {}).items():
            if os.path.isabs(rel) or ".." in rel.split("/"):
                return {
                    "driver_error": f"file {rel!r} is not a relative path inside the case directory"
                }
            path = os.path.join(scratch, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = decode_bytes(content)
            with open(path, "wb") as fh:
                fh.write(data)
            seeded[rel] = data
        env = child_env(config)
        env.update(req.get("env", {}))
        argv = [a.replace("{case}", scratch) for a in fill(req["argv"], config)]
        try:
            proc = subprocess.run(
                argv,
                cwd=scratch,
                env=env,
                input=decode_bytes(req.get("stdin")),
                capture_output=True,
                timeout=float(req.get("timeout_s", config.get("timeout_s", 30.0))),
            )
            status = {
                "exit": proc.returncode,
                "stdout": encode_bytes(proc.stdout),
                "stderr": encode_bytes(proc.stderr),
            }
        except subprocess.TimeoutExpired:
            status = {
                "exit": None,
                "timed_out": True,
                "stdout": {"text": ""},
                "stderr": {"text": ""},
            }
        except OSError as exc:
            status = {
                "exit": None,
                "spawn_error": f"{type(exc).__name__}: {exc}",
                "stdout": {"text": ""},
                "stderr": {"text": ""},
            }
        after = snapshot(scratch)
        status["files"] = {
            rel: encode_bytes(data)
            for rel, data in sorted(after.items())
            if seeded.get(rel) != data
        }
        status["removed"] = sorted(rel for rel in seeded if rel not in after)
        return status
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    config = load_config()
    return serve(config, lambda: config, run_one)


if __name__ == "__main__":
    sys.exit(main())
