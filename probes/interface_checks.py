"""Generic candidate-side checks derived from the task's declared interface, and what could not run.

The built-in checks every task gets are imports, independence and the migration
audit. What else a candidate must do (trace under jit, give live gradients, convert
a checkpoint into its own parameter tree, run its entry points) depends on names only
the task knows: `[metadata.twin.interface]` (`task_model.interface`) declares
them. `interface_check(task)` runs the checks the declaration gives something to run
with (the template `probes/interface_probe.py`, candidate side only);
`check_plan(task)` says which ran and which could not, and why.
"""

from __future__ import annotations

from pathlib import Path

from evidence_store.records import ProbeResult
from probes.base import Probe
from probes.checks import checks_probe, chosen_checks
from probes.context import ProbeContext
from probes.probe_format import read_probe_file
from task_model.model import Task

TEMPLATE = Path(__file__).with_name("interface_probe.py")
ALWAYS = ["imports", "independence", "audit.wrapping", "audit.vendored", "audit.transliteration"]
CHECKS = {
    # check name: (property id, kind, level, description, what the interface must declare)
    "check_jit": ("interface.jit", "jit", 1, "The declared functions trace and run under jax.jit.", "jit"),
    "check_gradients": (
        "interface.gradients",
        "grad_liveness",
        2,
        "Gradients of the declared loss are finite and reach every parameter.",
        "loss",
    ),
    "check_param_tree": (
        "interface.param_tree",
        "param_tree",
        0,
        "The declared converter's output has the candidate's own parameter tree (paths, shapes, dtypes).",
        "converter",
    ),
    "check_entrypoints": ("interface.entrypoints", "entrypoint", 3, "The declared entry points exit 0.", "entrypoints"),
}
LABELS = {"jit": "jit-traceability", "loss": "gradients", "converter": "parameter tree", "entrypoints": "entry points"}


def declared_checks(task: Task) -> list[str]:
    """The `check_*` names the task's interface gives something to run with."""
    interface = task.settings.interface
    return [name for name, spec in CHECKS.items() if getattr(interface, spec[4])]


def check_plan(task: Task) -> tuple[list[str], list[str]]:
    """What the built-in checks run on this task, and what they cannot run (with why).

    Returns:
        (property ids that run, one line per family that does not run).
    """
    ran = ALWAYS + [CHECKS[name][0] for name in declared_checks(task)]
    skipped = [
        f"{LABELS[spec[4]]}: no {spec[4]} declared in [metadata.twin.interface] of the task"
        for name, spec in CHECKS.items()
        if name not in declared_checks(task)
    ]
    return ran, skipped


def probe_file_text(task: Task) -> str:
    """The interface probe file for `task`: the template with its SPEC and PROBES filled in."""
    probes = {
        name: {"id": spec[0], "kind": spec[1], "level": spec[2], "description": spec[3]}
        for name, spec in CHECKS.items()
    }
    probes["check_entrypoints"]["timeout_s"] = task.settings.interface.entrypoint_timeout_s * max(
        1, len(task.settings.interface.entrypoints)
    )
    spec = task.settings.interface.model_dump(mode="json")
    # Literals (repr of JSON data), so the probe file is read without executing it.
    return TEMPLATE.read_text() + f"\n\nSPEC = {spec!r}\nPROBES = {probes!r}\n"


def interface_check() -> Probe:
    """The checks the task's declared interface allows, as one candidate-side process."""

    def probe(ctx: ProbeContext) -> list[ProbeResult]:
        names = declared_checks(ctx.task)
        if not names:
            return []
        folder = ctx.workdir / "interface"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "interface_checks.py"
        path.write_text(probe_file_text(ctx.task))
        file = read_probe_file(path)
        return checks_probe(file, chosen_checks(file, [name.removeprefix("check_") for name in names]))(ctx)

    return probe
