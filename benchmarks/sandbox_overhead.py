"""One sandbox exec against a minimal bubblewrap exec, in the same run, and what each added part costs.

    python benchmarks/sandbox_overhead.py [--runs 40] [--command true] [--staged]

The sandbox is a candidate-side role's: the interpreter's mounts, a writable
candidate, torch hidden, no network, the default limits, the seccomp filter and,
as root, the switch to the sandbox uid. The candidate lies where the sandbox uid can
reach it, as a run directory does (`--staged` puts it where it cannot, so that each
command first binds it onto a staging path).

The floor is `bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all CMD`. The
sandbox's own command line (as its exec launches it, captured once) is run with its
parts added one at a time, so that each step's difference is what that part costs:
bubblewrap with the sandbox's namespaces and mounts, then its `/dev/shm`, its seccomp
filter, the uid switch, the limits (set on the sandbox while it waits for its filter,
by twin or by its limits helper, whose CPU time is counted as the command's); the last
step, a whole `exec`, adds the harness's own work per command (boundary check, disk
watch, writable-root settling, output handling). All variants run interleaved, round
after round, so that a busy machine weighs on each alike. Each row: median and min wall
time, and median CPU time (this process and its children, user and system). The goal is
an exec within 2x the floor; on a shared machine the min (the least disturbed run) and
the CPU time say more than the median wall time, and the load is printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ground.boundary import Boundary, Mount  # noqa: E402
from ground.isolation import python_mounts, scratch_dir  # noqa: E402
from ground.sandboxes import gate, process  # noqa: E402
from ground.sandboxes.disk import DiskWatch  # noqa: E402
from ground.sandboxes.privilege import settle_writable  # noqa: E402
from ground.sandboxes.registry import make_sandbox  # noqa: E402

GOAL_RATIO = 2.0


def cpu_s() -> float:
    """CPU seconds of this process, its ended children and the running limits helper."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + helper_cpu_s()


def helper_cpu_s() -> float:
    pid = gate.LIMITER.helper_pid()
    if pid is None:
        return 0.0
    try:  # time on a CPU in nanoseconds (/proc/PID/stat counts whole clock ticks)
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def captured_launch(sandbox, argv: list[str]) -> tuple[list[str], dict]:
    """The argv and environment one `sandbox.exec(argv)` hands to the kernel."""
    seen: dict = {}
    real = process.subprocess.Popen

    def spy(args, **kwargs):
        seen.setdefault("argv", list(args))
        seen.setdefault("env", kwargs.get("env"))
        return real(args, **kwargs)

    process.subprocess.Popen = spy
    try:
        sandbox.exec(argv)
    finally:
        process.subprocess.Popen = real
    return seen["argv"], seen["env"]


def steps(sandbox, argv: list[str], seccomp: Path) -> list[tuple[str, Callable[[], None]]]:
    """(name, call) of each cumulative step from the floor to a whole exec."""
    launch, env = captured_launch(sandbox, argv)
    bwrap = shutil.which("bwrap")
    start = launch.index("--unshare-user")
    switch, gated = launch[:start], launch[start:]  # capsh (it becomes bwrap) or setpriv ... bwrap; [] when not root
    held = gated.index("--info-fd")
    options = gated[:held] + gated[held + 2 :]
    seccomp_at = options.index("--seccomp")
    no_seccomp = options[:seccomp_at] + options[seccomp_at + 2 :]
    shm = no_seccomp.index("/dev/shm")
    bare_mounts = no_seccomp[: shm - 3] + no_seccomp[shm + 1 :]

    def run(args: list[str], *, filtered: bool = False, limited: bool = False) -> None:
        fds: list[int] = []
        args = list(args)
        held = gate.LaunchGate(seccomp.read_bytes()) if limited else None
        if filtered and held is None:
            fds.append(os.open(seccomp, os.O_RDONLY))
            at = args.index("--seccomp")
            args[at + 1] = str(fds[0])
        if held is not None:  # its report and filter pipes
            at = args.index("--info-fd")
            args[at : at + 4] = held.options()
        try:
            proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                pass_fds=(*fds, *(held.fds if held else ())),
            )
            if held is not None:
                held.started()
                held.release(proc, sandbox.boundary.limits, deadline=time.monotonic() + 30)
            _, stderr = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"{args[:3]}... failed: {stderr.decode(errors='replace')[-500:]}")
        finally:
            for fd in fds:
                os.close(fd)
            if held is not None:
                held.close()

    floor = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", *argv]
    found = [
        ("minimal bwrap (the floor)", lambda: run(floor)),
        ("+ the sandbox's namespaces, mounts", lambda: run([bwrap, *bare_mounts])),
        ("+ /dev/shm (tmpfs)", lambda: run([bwrap, *no_seccomp])),
        ("+ seccomp filter", lambda: run([bwrap, *options], filtered=True)),
    ]
    if switch:
        name = f"+ uid switch ({Path(switch[0]).name})"
        found.append((name, lambda: run([*switch, *options], filtered=True)))
    found.append(("+ limits on the held sandbox", lambda: run(launch, filtered=True, limited=True)))
    found.append(("+ the harness's work: sandbox.exec", lambda: sandbox.exec(argv)))
    return found


def harness_parts(sandbox, repeats: int) -> list[tuple[str, float]]:
    """Median CPU ms of the per-exec work done in this process: disk watch and writable-root settling.

    On the benchmark's empty candidate, and on a candidate of 1,000 files: both walk the tree
    (a candidate on twin's capped filesystem is measured by `statvfs`, not walked).
    """
    writable = [m for m in sandbox.boundary.mounts if m.writable]

    def watch() -> None:
        disk = DiskWatch.of(writable, sandbox.boundary.limits.disk_mb)
        disk.budgeted(sandbox.boundary.limits)
        disk.over()

    def settle() -> None:
        for mount in writable:
            settle_writable(mount.host)
            settle_writable(mount.host)

    with tempfile.TemporaryDirectory(dir=scratch_dir("bench-tree-")) as tree:
        for package in range(50):  # a candidate of 1,000 files in 50 packages
            (Path(tree) / f"pkg{package}").mkdir()
            for module in range(20):
                (Path(tree) / f"pkg{package}" / f"m{module}.py").write_text("x = 1\n")
        walked = DiskWatch([Path(tree)], sandbox.boundary.limits.disk_mb)
        return _medians(
            [
                ("disk watch (quota/usage, before and after)", watch),
                ("writable roots settled (twice)", settle),
                ("writable roots settled, 1,000 files", lambda: [settle_writable(Path(tree)) for _ in range(2)]),
                ("disk watch, 1,000 files, no quota (once)", lambda: walked.budgeted(sandbox.boundary.limits)),
            ],
            repeats,
        )


def _medians(calls: list[tuple[str, Callable[[], object]]], repeats: int) -> list[tuple[str, float]]:
    rows = []
    for name, call in calls:
        times = []
        for _ in range(repeats):
            started = time.process_time()
            call()
            times.append(time.process_time() - started)
        rows.append((name, statistics.median(times) * 1000))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--command", default="true", help="the trivial command (one word)")
    parser.add_argument("--staged", action="store_true", help="candidate the sandbox uid cannot reach")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        raise SystemExit("bubblewrap is not installed: nothing to measure")
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
        sandbox = make_sandbox("bwrap", boundary)
        argv = [args.command]
        variants = steps(sandbox, argv, sandbox._seccomp)
        variants.insert(0, ("bare subprocess", lambda: subprocess.run(argv, capture_output=True)))
        for _name, call in variants * 3:  # warm-up
            call()
        walls: dict[str, list[float]] = {name: [] for name, _ in variants}
        cpus: dict[str, list[float]] = {name: [] for name, _ in variants}
        loads = [os.getloadavg()[0]]
        for _ in range(args.runs):
            for name, call in variants:
                cpu, wall = cpu_s(), time.perf_counter()
                call()
                walls[name].append((time.perf_counter() - wall) * 1000)
                cpus[name].append((cpu_s() - cpu) * 1000)
        loads.append(os.getloadavg()[0])
        parts = harness_parts(sandbox, args.runs)
        sandbox.close()
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"command {args.command!r}, {args.runs} interleaved runs of each, {os.cpu_count()} cpus, "
        f"load average (1 min) {loads[0]:.1f} before, {loads[1]:.1f} after"
    )
    print(f"{'':38s} {'wall med':>9s} {'wall min':>9s} {'cpu med':>8s} {'step (cpu)':>11s}")
    previous = None
    for name, _ in variants:
        med, low, cpu = statistics.median(walls[name]), min(walls[name]), statistics.median(cpus[name])
        step = "" if previous is None or name == "minimal bwrap (the floor)" else f"{cpu - previous:+10.2f}"
        print(f"{name:38s} {med:9.2f} {low:9.2f} {cpu:8.2f} {step:>11s}")
        previous = None if name == "bare subprocess" else cpu
    for name, ms in parts:
        print(f"  of which {name:42s} cpu {ms:6.2f}")
    floor, boxed = "minimal bwrap (the floor)", variants[-1][0]
    ratios = {
        "wall median": statistics.median(walls[boxed]) / statistics.median(walls[floor]),
        "wall min": min(walls[boxed]) / min(walls[floor]),
        "cpu median": statistics.median(cpus[boxed]) / statistics.median(cpus[floor]),
    }
    print("sandbox exec / minimal bwrap: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    met = ratios["wall min"] <= GOAL_RATIO and ratios["cpu median"] <= GOAL_RATIO
    print(f"goal: <= {GOAL_RATIO:.0f}x (judged on wall min and cpu median): {'ok' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
