"""Median time one `exec` through a sandbox adds to the same trivial command run bare.

    python benchmarks/sandbox_overhead.py [--runs 50] [--kind bwrap] [--command true]

The sandbox is a candidate-side role's: the interpreter's mounts, a writable
candidate, torch hidden, no network, the default limits, the seccomp filter and,
as root, the switch to the sandbox uid. The candidate lies where the sandbox uid can
reach it, as a run directory does (`--staged` puts it where it cannot, so that each
command first binds it onto a staging path). The bare run is
`subprocess.run` of the same argv. Both are warmed up first (the pruned
site-packages is built once and cached).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ground.boundary import Boundary, Mount  # noqa: E402
from ground.isolation import (
    python_mounts,  # noqa: E402
    scratch_dir,  # noqa: E402
)
from ground.sandboxes.registry import make_sandbox  # noqa: E402


def median_ms(call, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kind", default="bwrap", help="sandbox kind (bwrap, docker, none)")
    parser.add_argument("--command", default="true", help="the trivial command (one word)")
    parser.add_argument("--staged", action="store_true", help="candidate the sandbox uid cannot reach")
    args = parser.parse_args()
    base = None if args.staged else scratch_dir("bench-")
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        if base is not None:
            os.chmod(tmp, 0o711)  # like a run directory: the sandbox uid can pass through
        candidate = Path(tmp) / "candidate"  # with --staged, under a 0700 directory
        candidate.mkdir()
        boundary = Boundary(
            name="benchmark",
            mounts=[*python_mounts(), Mount(host=Path(candidate), inside="/app", writable=True)],
            hidden_packages=["torch"],
            workdir="/app",
        )
        sandbox = make_sandbox(args.kind, boundary)
        argv = [args.command]
        for _ in range(3):
            sandbox.exec(argv)
            subprocess.run(argv)
        bare = median_ms(lambda: subprocess.run(argv, capture_output=True), args.runs)
        boxed = median_ms(lambda: sandbox.exec(argv), args.runs)
        sandbox.close()
        # For scale: the cheapest bubblewrap call there is (one mount, no new namespaces).
        floor = None
        if shutil.which("bwrap"):
            minimal = ["bwrap", "--ro-bind", "/", "/", "--", *argv]
            floor = median_ms(lambda: subprocess.run(minimal, capture_output=True), args.runs)
    load = os.getloadavg()[0]
    print(
        f"command: {args.command!r}, runs: {args.runs}, sandbox: {args.kind}, "
        f"cpus: {os.cpu_count()}, load average (1 min): {load:.1f}"
    )
    print(f"bare subprocess          median {bare:7.2f} ms")
    if floor is not None:
        print(f"minimal bwrap (for scale) median {floor:7.2f} ms")
    print(f"sandbox exec             median {boxed:7.2f} ms")
    print(f"overhead                 median {boxed - bare:7.2f} ms (target: under 20 ms)")
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
