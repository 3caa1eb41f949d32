"""What every probe receives: the task, the candidate, where the two sides run and how.

A `ProbeContext` says which candidate is examined (host path, commit), where the
original and the assets are, the working directory for probe files and outputs,
and the policy applied to both sides alike: sandbox kind, device, precision.
`sandbox(side)` builds the sandbox of one side through the isolation policy
(`ground.isolation.probe_boundary`): the reference side sees the original, the
assets and torch; the candidate side sees the candidate and the assets, with the
forbidden packages physically absent and no network. Each side has its own
directories: `side_work(side)` (writable, its outputs) and `side_given(side)`
(read-only, the probe file, the driver and the inputs handed to it); neither side
sees the other's. `roots(side)` says where these appear inside that side's sandbox.
A work directory twin made itself is removed by `close()` unless `keep` is set.
"""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ground.agent_tree import discard_tree
from ground.errors import TwinError
from ground.isolation import PROBE_GIVEN, PROBE_WORK, Layout, probe_boundary, scratch_dir
from ground.sandboxes.registry import make_sandbox
from task_model.layout import laid_out_mounts
from task_model.model import Task
from task_model.reference_env import reference_site

Side = Literal["reference", "candidate"]
SANDBOX_KINDS = ("auto", "none", "bwrap")
DEVICES = ("cpu", "gpu")
PRECISIONS = ("highest", "default", "bf16")
PROBE_MOUNT = PROBE_WORK


class ProbeOptionError(TwinError):
    """A probe option (sandbox kind, device, precision, paths) is not usable."""


@dataclass
class ProbeContext:
    """Everything a probe needs to run against one candidate.

    Attributes:
        task: the loaded task (only its visible parts are used).
        candidate: the candidate work tree on the host.
        source: the original repository on the host.
        assets: the assets directory on the host, if the task has one.
        workdir: host directory for probe files, inputs and outputs (writable).
        sandbox_kind: 'bwrap', 'none' (plain subprocess, tests) or 'auto'.
        device: 'cpu' or 'gpu'; applied to both sides.
        precision: 'highest' (no TF32 or reduced-precision matmuls), 'default'
            (each library's own defaults) or 'bf16' (both sides in bfloat16).
        audit_log: where boundary refusals are appended.
        candidate_commit: the candidate commit the results are taken on.
        seed: seed of the inputs and of both sides' random generators.
        timeout_s: wall-time limit of one side of one probe file (plus what its probes ask for).
        reference_cache: where reference-side outputs are kept and re-used (they do
            not depend on the candidate); None to always run the reference.
        deadline: `time.monotonic()` after which no side may run (what is left of a run's
            wall budget); every side's limit is cut to it. None: no deadline.
        keep: keep the work directory after `close()` (always kept when the user named it).
    """

    task: Task
    candidate: Path
    source: Path
    assets: Path | None
    workdir: Path
    sandbox_kind: str = "auto"
    device: str = "cpu"
    precision: str = "highest"
    audit_log: Path | None = None
    candidate_commit: str | None = None
    seed: int = 0
    timeout_s: float = 600.0
    reference_cache: Path | None = None
    deadline: float | None = None
    keep: bool = True
    _sandboxes: dict = field(default_factory=dict, repr=False)
    _building: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def resolved_sandbox_kind(self) -> str:
        """'bwrap' or 'none' once 'auto' is decided (bwrap where installed)."""
        if self.sandbox_kind != "auto":
            return self.sandbox_kind
        return "bwrap" if shutil.which("bwrap") else "none"

    def side_limit(self, wanted_s: float) -> float:
        """The wall-time limit of one side's run: `wanted_s`, cut to what is left before `deadline`."""
        if self.deadline is None:
            return wanted_s
        return max(0.0, min(wanted_s, self.deadline - time.monotonic()))

    @property
    def dtype(self) -> str:
        """The working dtype of both sides under the precision policy."""
        return "bfloat16" if self.precision == "bf16" else "float32"

    def roots(self, side: Side) -> dict[str, str | None]:
        """Where source, candidate, assets and the side's own work directory appear inside `side`."""
        isolated = self.resolved_sandbox_kind != "none"
        settings = self.task.settings
        assets = None
        if self.assets is not None and self.assets.is_dir():
            assets = settings.assets_mount if isolated else str(self.assets)
        work = PROBE_WORK if isolated else str(self.side_work(side))
        if side == "reference":
            source = settings.source_mount if isolated else str(self.source)
            return {"source": source, "candidate": None, "assets": assets, "work": work}
        candidate = settings.candidate_mount if isolated else str(self.candidate)
        return {"source": None, "candidate": candidate, "assets": assets, "work": work}

    def side_work(self, side: Side) -> Path:
        """The host directory only `side` writes (its outputs, its scratch)."""
        return self.workdir / "sides" / side / "work"

    def side_given(self, side: Side) -> Path:
        """The host directory of what `side` is handed, read-only (probe file, driver, inputs)."""
        return self.workdir / "sides" / side / "given"

    def given_root(self, side: Side) -> str:
        """Where `side_given(side)` appears inside `side`."""
        return PROBE_GIVEN if self.resolved_sandbox_kind != "none" else str(self.side_given(side))

    def inside(self, side: Side, host_path: Path) -> str:
        """A path under the side's work or given directory as seen inside `side`'s sandbox.

        Raises:
            ValueError: the path is in neither (not visible to that side).
        """
        host = host_path.resolve()
        for base, root in (
            (self.side_work(side), self.roots(side)["work"]),
            (self.side_given(side), self.given_root(side)),
        ):
            base = base.resolve()
            if host == base or base in host.parents:
                return str(Path(root) / host.relative_to(base))
        raise ValueError(f"{host_path} is not visible on the {side} side")

    def forbidden(self, side: Side) -> list[str]:
        """Packages refused on `side` (the source framework on the candidate side)."""
        return list(self.task.settings.forbidden_packages) if side == "candidate" else []

    def side_env(self) -> dict[str, str]:
        """Environment of both sides: device selection, precision, determinism."""
        env = {
            "PYTHONHASHSEED": str(self.seed),
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if self.device == "cpu":
            env.update({"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""})
        if self.precision != "default":
            env.update({"JAX_DEFAULT_MATMUL_PRECISION": "highest", "NVIDIA_TF32_OVERRIDE": "0"})
        return env

    def sandbox(self, side: Side):
        """The sandbox of one side (built once, reused).

        Probes running at once (`run_probes(jobs=...)`) ask for it from several threads: it is
        built under a lock, so that two builds never cap and present the same work directory
        at once (the second would find it half set up, and one sandbox would be left open).

        Raises:
            ground.sandbox.SandboxError: bwrap was asked for and cannot run.
        """
        with self._building:
            if side not in self._sandboxes:
                self._sandboxes[side] = self._build_sandbox(side)
            return self._sandboxes[side]

    def _build_sandbox(self, side: Side):
        kind = self.resolved_sandbox_kind
        for path in (self.side_work(side), self.side_given(side)):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)
        settings = self.task.settings
        layout = Layout(
            candidate=self.candidate,
            candidate_mount=settings.candidate_mount,
            source=self.source,
            source_mount=settings.source_mount,
            assets=self.assets if self.assets is not None and self.assets.is_dir() else None,
            assets_mount=settings.assets_mount,
            hidden=list(self.task.hidden_roots),
            forbidden_packages=list(settings.forbidden_packages),
            laid_out=laid_out_mounts(self.task),
            image=self.task.image,
            reference_site=reference_site(settings.original) if side == "reference" else None,
        )
        boundary = probe_boundary(
            layout,
            side=side,
            work=self.side_work(side),
            given=self.side_given(side),
            audit_log=self.audit_log,
            env=self.side_env(),
            wall_s=self.timeout_s,
            isolated=kind != "none",
        )
        # 'none' is a plain subprocess: the forbidden packages stay importable, so the
        # probe driver refuses them with an import hook (real runs use bwrap).
        return make_sandbox(kind, boundary)

    def close(self) -> None:
        """Close both sides' sandboxes; remove the work directory twin made, unless `keep`.

        The directory goes even when closing a sandbox fails (that error is raised after).
        """
        try:
            with self._building, ExitStack() as stack:  # every sandbox is closed even if one fails to
                for sandbox in self._sandboxes.values():
                    stack.callback(sandbox.close)
                self._sandboxes.clear()
        finally:
            if not self.keep:
                _remove_workdir(self.workdir)

    def __enter__(self) -> ProbeContext:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _remove_workdir(workdir: Path) -> None:
    """Remove a probe work directory, however deep the sides wrote into it."""
    discard_tree(workdir)


def _contains(root: Path, path: Path) -> bool:
    root, path = root.resolve(), path.resolve()
    return root == path or root in path.parents


def make_context(task: Task, candidate: Path | str, **options) -> ProbeContext:
    """Build a probe context for `candidate` against `task`'s original.

    Args:
        task: the loaded task (`task_model.loader`).
        candidate: the candidate work tree (host path).
        **options: any `ProbeContext` field (sandbox_kind, device, precision,
            workdir, audit_log, candidate_commit, seed, timeout_s, keep). Without
            `workdir`, a fresh one is made and removed by `close()` unless `keep`.

    Raises:
        ProbeOptionError: unknown option or value, or the candidate is not a directory.
    """
    candidate = Path(candidate).expanduser().resolve()
    if not candidate.is_dir():
        raise ProbeOptionError(f"candidate directory not found: {candidate}")
    known = {
        "sandbox_kind",
        "device",
        "precision",
        "workdir",
        "audit_log",
        "candidate_commit",
        "seed",
        "timeout_s",
        "reference_cache",
        "deadline",
        "keep",
    }
    unknown = set(options) - known
    if unknown:
        raise ProbeOptionError(f"unknown probe option(s): {', '.join(sorted(unknown))}")
    checks = {"sandbox_kind": SANDBOX_KINDS, "device": DEVICES, "precision": PRECISIONS}
    for name, allowed in checks.items():
        if name in options and options[name] not in allowed:
            raise ProbeOptionError(
                f"--{name.split('_')[0]} must be one of {', '.join(allowed)}, not {options[name]!r}"
            )
    if options.get("sandbox_kind") == "bwrap" and shutil.which("bwrap") is None:
        raise ProbeOptionError(
            "bubblewrap (bwrap) is not installed: install it or use --sandbox none"
        )
    if options.get("reference_cache") is not None:
        options["reference_cache"] = Path(options["reference_cache"]).resolve()
        options["reference_cache"].mkdir(parents=True, exist_ok=True)
    workdir = options.pop("workdir", None)
    if workdir:
        options["keep"] = True  # a directory the user named is never removed
        workdir = Path(workdir)
    else:
        options.setdefault("keep", False)
        workdir = scratch_dir("twin-probe-")
    workdir.mkdir(parents=True, exist_ok=True)
    assets = task.assets_dir if task.assets_dir is not None and task.assets_dir.is_dir() else None
    return ProbeContext(
        task=task,
        candidate=candidate,
        source=task.source_dir.resolve(),
        assets=assets,
        workdir=workdir.resolve(),
        **options,
    )
