"""What every probe receives: the task, the candidate, where the two sides run and how.

A `ProbeContext` says which candidate is examined (host path, commit), where the
original and the assets are, the working directory for probe files and outputs,
and the policy applied to both sides alike: sandbox kind, device, precision.
`sandbox(side)` builds the sandbox of one side: the reference side sees the
original, the assets and torch; the candidate side sees the candidate and the
assets, with the forbidden packages physically absent and no network.
`roots(side)` says where those directories appear inside that side's sandbox.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from benchmark_adapter.task import Task, load_task
from harness.errors import TwinError

Side = Literal["reference", "candidate"]
SANDBOX_KINDS = ("auto", "none", "bwrap")
DEVICES = ("cpu", "gpu")
PRECISIONS = ("highest", "default", "bf16")
PROBE_MOUNT = "/probe"
SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/etc", "/sbin")


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
    _sandboxes: dict = field(default_factory=dict, repr=False)

    @property
    def resolved_sandbox_kind(self) -> str:
        """'bwrap' or 'none' once 'auto' is decided (bwrap where installed)."""
        if self.sandbox_kind != "auto":
            return self.sandbox_kind
        return "bwrap" if shutil.which("bwrap") else "none"

    @property
    def dtype(self) -> str:
        """The working dtype of both sides under the precision policy."""
        return "bfloat16" if self.precision == "bf16" else "float32"

    def roots(self, side: Side) -> dict[str, str | None]:
        """Where source, candidate, assets and the probe workdir appear inside `side`."""
        isolated = self.resolved_sandbox_kind != "none"
        settings = self.task.settings
        assets = None
        if self.assets is not None and self.assets.is_dir():
            assets = settings.assets_mount if isolated else str(self.assets)
        if side == "reference":
            source = settings.source_mount if isolated else str(self.source)
            return {
                "source": source,
                "candidate": None,
                "assets": assets,
                "work": self._work(isolated),
            }
        candidate = settings.candidate_mount if isolated else str(self.candidate)
        return {
            "source": None,
            "candidate": candidate,
            "assets": assets,
            "work": self._work(isolated),
        }

    def _work(self, isolated: bool) -> str:
        return PROBE_MOUNT if isolated else str(self.workdir)

    def inside(self, side: Side, host_path: Path) -> str:
        """A path under `workdir` as seen inside `side`'s sandbox."""
        rel = host_path.resolve().relative_to(self.workdir.resolve())
        return str(Path(self.roots(side)["work"]) / rel)

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

        Raises:
            harness.sandbox.base.SandboxError: bwrap was asked for and cannot run.
        """
        if side not in self._sandboxes:
            self._sandboxes[side] = self._build_sandbox(side)
        return self._sandboxes[side]

    def _build_sandbox(self, side: Side):
        from harness.boundary import Boundary, Limits, Mount
        from harness.sandbox.registry import make_sandbox

        kind = self.resolved_sandbox_kind
        roots = self.roots(side)
        hosts = {
            "work": self.workdir,
            "assets": self.assets,
            "source": self.source,
            "candidate": self.candidate,
        }
        mounts = [
            Mount(host=Path(hosts[name]), inside=inside, writable=name == "work")
            for name, inside in roots.items()
            if inside is not None
        ]
        if kind != "none":
            from harness.workspace import layout_mounts

            mounts += layout_mounts(self.task, aliases=False)
            mounts += [Mount(host=Path(d), inside=d) for d in SYSTEM_DIRS if Path(d).exists()]
            for prefix in {sys.prefix, sys.base_prefix}:
                if not any(prefix.startswith(d + "/") for d in SYSTEM_DIRS):
                    mounts.append(Mount(host=Path(prefix), inside=prefix))
        boundary = Boundary(
            name=f"probe:{side}",
            mounts=mounts,
            # A candidate the user points at inside a hidden root (the oracle under
            # solution/) stays visible; everything else hidden stays hidden.
            hidden=[h for h in self.task.hidden_roots if not _contains(h, self.candidate)],
            hidden_packages=self.forbidden(side),
            network=False,
            env=self.side_env(),
            limits=Limits(wall_s=self.timeout_s),
            workdir=roots["work"],
            audit_log=self.audit_log,
        )
        # 'none' is a plain subprocess: the forbidden packages stay importable, so the
        # probe driver refuses them with an import hook (real runs use bwrap).
        return make_sandbox(kind, boundary)

    def close(self) -> None:
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._sandboxes.clear()


def _contains(root: Path, path: Path) -> bool:
    root, path = root.resolve(), path.resolve()
    return root == path or root in path.parents


def make_context(task: Task | Path | str, candidate: Path | str, **options) -> ProbeContext:
    """Build a probe context for `candidate` against `task`'s original.

    Args:
        task: a loaded task or its directory.
        candidate: the candidate work tree (host path).
        **options: any `ProbeContext` field (sandbox_kind, device, precision,
            workdir, audit_log, candidate_commit, seed, timeout_s).

    Raises:
        ProbeOptionError: unknown option or value, or the candidate is not a directory.
    """
    task = task if isinstance(task, Task) else load_task(task)
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
    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="twin-probe-"))
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
