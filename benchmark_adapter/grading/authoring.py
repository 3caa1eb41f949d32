"""`twin task new`: a Harbor task, in the published layout, from a PyTorch repository and probe files.

The task is self-contained (nothing in it imports twin) and laid out as published
migration tasks are: `environment/Dockerfile` copies the original (`torch_orig/`)
and the assets (`checkpoint/`) into `/app`, the instruction asks for the port in
`/app/jax_repo/`, and `tests/` is a grader generated from the probe files
(`templates/grader/`). The references are recorded once, at creation
(`benchmark_adapter.grading.references`), by running the reference side of every probe
on the original (working dtype, then float64 or a rerun for the noise floor),
exactly as `twin probe` would.

Nothing is written unless everything succeeds: the task is built in a staging
directory next to its destination, loaded back as a published task, its references
recorded, its oracle (if given) graded, and only then moved into place.
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pydantic import BaseModel, Field

from benchmark_adapter.grading.check import slow_grade_warning
from benchmark_adapter.grading.checkpoint import PICKLED_SUFFIXES, checkpoint_note, convert_checkpoint
from benchmark_adapter.grading.grader import oracle_copy, readable_to_all, run_grader
from benchmark_adapter.grading.interface_file import InterfaceEntry, interface_note, twin_metadata
from benchmark_adapter.grading.references import record_references
from evidence_store import numbers
from probes.probe_format import ProbeFileError, probe_names
from task_model.distribution import materialize
from task_model.distribution_install import (
    declaration_toml,
    declare_from_index,
    dockerfile_fetch_run,
    pinned_constraint,
)
from task_model.import_closure import wheel_selection
from task_model.layout import copy_without_history
from task_model.loader import load_task
from task_model.model import Task, TaskError
from task_model.original import OriginalDistribution
from task_model.published import imports_framework
from task_model.reference_env import build as build_reference_env
from task_model.reference_env import held_torch
from task_model.reference_lock import dockerfile_lock_run

TEMPLATES = Path(__file__).with_name("templates")
PROBES_PACKAGE = Path(__file__).resolve().parents[2] / "probes"  # twin's own package, in a wheel too
EVIDENCE_PACKAGE = PROBES_PACKAGE.parent / "evidence_store"
ORIGINAL_NAME, ASSETS_NAME = "torch_orig", "checkpoint"
WORKDIR = "/app"
ORACLE_MIN = 0.97
# files copied into every generated grader (all package data, nothing read from a checkout),
# with the imports that must not name twin's packages
GRADER_FILES = {
    "test.sh": TEMPLATES / "grader" / "test.sh",
    "grade.py": TEMPLATES / "grader" / "grade.py",
    "grading.py": TEMPLATES / "grader" / "grading.py",
    "grading_run.py": TEMPLATES / "grader" / "grading_run.py",
    "grading_sandbox.py": TEMPLATES / "grader" / "grading_sandbox.py",
    "compare.py": PROBES_PACKAGE / "compare.py",
    "similarity.py": PROBES_PACKAGE / "similarity.py",
    "probe_driver.py": PROBES_PACKAGE / "driver.py",
    "measure_text.py": EVIDENCE_PACKAGE / "numbers.py",  # how compare.py writes its numbers
}
REWRITES = {
    "from probes.similarity import": "from similarity import",
    "from evidence_store import numbers": "import measure_text as numbers",
}
TWIN_PACKAGES = frozenset(
    {"ground", "task_model", "harness", "roles", "probes", "prompts", "evidence_store", "benchmark_adapter"}
)


class NewTaskReport(BaseModel):
    """What `twin task new` made."""

    task: Path = Field(description="The task directory.")
    probes: list[str] = Field(description="Property ids the grader checks.")
    oracle_reward: float | None = Field(default=None, description="Reward of the oracle (None: no oracle).")
    notes: list[str] = Field(default_factory=list, description="What the Dockerfile reader noted.")
    warnings: list[str] = Field(default_factory=list, description="What the user should act on (a slow grade).")


def new_task(
    dest: Path,
    *,
    source: Path | str | None = None,
    include: list[str] = (),
    include_closure: list[str] = (),
    exclude: list[str] = (),
    probes: list[Path] = (),
    assets: Path | None = None,
    instruction: Path | None = None,
    interface: list[str] | list[InterfaceEntry] = (),
    oracle: Path | None = None,
    name: str | None = None,
    output: str = "/app/jax_repo",
    checkpoint_from: Path | None = None,
    refresh: bool = False,
    sandbox: str = "auto",
    timeout_s: float = 600.0,
    say: Callable[[str], None] = lambda line: None,
) -> NewTaskReport:
    """Make (or, with `refresh`, re-record the references of) a task; see the module docstring.

    `source` is a directory, or `pypi:NAME==VERSION`: a distribution of the package index whose
    files `include` are the original, declared in task.toml and fetched by the Dockerfile
    (`task_model.distribution`), never copied into the task; `include_closure` adds the static
    import closure of those modules (`task_model.import_closure`, its size said to `say`), and
    `exclude` takes files or directories out again.

    `interface` names what the port must keep: command-line names, or entries read from an
    interface file (`interface_file.interface_entries`).

    Raises:
        TaskError: bad input (one line); nothing is written then.
    """
    dest = Path(dest).expanduser().resolve()
    interface = [e if isinstance(e, InterfaceEntry) else InterfaceEntry(signature=e, kind="name") for e in interface]
    if refresh:
        return _refresh(dest, sandbox=sandbox, timeout_s=timeout_s)
    original = None
    if str(source or "").startswith("pypi:"):
        select = wheel_selection(list(include_closure), list(include), list(exclude), say)
        original = declare_from_index(str(source), list(include), select=select)
        if original.dependencies:
            build_reference_env(original)  # the references are recorded with it; the Dockerfile installs its lock
        source = materialize(original)
    elif include or include_closure or exclude:
        raise TaskError("--include applies to --source pypi:NAME==VERSION only, as --include-closure and --exclude do")
    _validate(dest, source, probes, assets, instruction, interface, oracle, output)
    if checkpoint_from is not None and not (
        Path(checkpoint_from).is_file() and Path(checkpoint_from).suffix in PICKLED_SUFFIXES
    ):
        kinds = ", ".join(PICKLED_SUFFIXES)
        raise TaskError(f"--checkpoint-from needs a pickled checkpoint file ({kinds}): {checkpoint_from}")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        _write_task(staging, source, probes, assets, instruction, interface, oracle, name or dest.name, output,
                    checkpoint_from, original)  # fmt: skip
        try:
            task = load_task(staging)
        except TaskError as exc:
            raise TaskError(f"the made task does not load: {str(exc).replace(staging.name, dest.name)}") from None
        if task.settings.candidate_mount != output.rstrip("/"):
            raise TaskError(
                f"the instruction names {task.settings.candidate_mount} as the output, not {output}; "
                "name the output directory in it (or pass --output)"
            )
        spec = record_references(task, sandbox=sandbox, timeout_s=timeout_s)
        oracle_reward, warnings = _grade_oracle(task, sandbox) if oracle is not None else (None, [])
        staging.chmod(0o755)  # a task directory like any other (mkdtemp made it 0700)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    notes = task.environment.notes if task.environment else []
    named = [e.function or e.signature for e in interface]
    notes += [n for n in [interface_note(named), checkpoint_note(assets, checkpoint_from is not None)] if n]
    return NewTaskReport(
        task=dest, probes=[p["id"] for p in spec["probes"]], oracle_reward=oracle_reward, notes=notes, warnings=warnings
    )


def _validate(dest, source, probes, assets, instruction, interface, oracle, output) -> None:
    if dest.exists():
        raise TaskError(f"{dest} exists; choose a new directory, or pass --refresh to re-record its references")
    if not dest.parent.is_dir():
        raise TaskError(f"parent directory of {dest} does not exist")
    if source is None or not Path(source).is_dir():
        raise TaskError(f"source directory not found: {source}")
    if not imports_framework(Path(source), "torch"):
        raise TaskError(f"{source}: no Python file imports torch (not a PyTorch repository)")
    if not probes:
        raise TaskError("give at least one --probe FILE (format: probes/README.md)")
    for probe in probes:
        try:
            probe_names(Path(probe))
        except (ProbeFileError, OSError) as exc:
            raise TaskError(f"bad probe file: {exc}") from None
    if len({Path(p).name for p in probes}) != len(probes):
        raise TaskError("two probe files share a file name; rename one")
    if assets is not None and not Path(assets).is_dir():
        raise TaskError(f"assets directory not found: {assets}")
    if (instruction is None) == (not interface):
        raise TaskError("pass exactly one of --instruction FILE or --interface NAMES (or a file of signatures)")
    if instruction is not None and not Path(instruction).is_file():
        raise TaskError(f"instruction file not found: {instruction}")
    if oracle is not None and not Path(oracle).is_dir():
        raise TaskError(f"oracle directory not found: {oracle}")
    if not output.startswith(WORKDIR + "/") or output.rstrip("/") in (
        f"{WORKDIR}/{ORIGINAL_NAME}",
        f"{WORKDIR}/{ASSETS_NAME}",
    ):
        raise TaskError(f"--output must be a new directory under {WORKDIR}/, not {output}")


def _render(template: str, **values) -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True)
    return env.get_template(template).render(**values)


def _write_task(
    root, source, probes, assets, instruction, interface, oracle, name, output, checkpoint_from,
    original: OriginalDistribution | None = None,
) -> None:  # fmt: skip
    output = output.rstrip("/")
    env_dir = root / "environment"
    env_dir.mkdir()
    if original is None:
        copy_without_history(Path(source), env_dir / ORIGINAL_NAME)
    if assets is not None:
        copy_without_history(Path(assets), env_dir / ASSETS_NAME)
    if checkpoint_from is not None:  # the port gets safetensors; the pickle never enters the task
        (env_dir / ASSETS_NAME).mkdir(exist_ok=True)
        convert_checkpoint(Path(checkpoint_from), env_dir / ASSETS_NAME / f"{Path(checkpoint_from).stem}.safetensors")
        assets = env_dir / ASSETS_NAME
    readable_to_all(env_dir)  # sandboxes run as an unprivileged uid: a 0600 checkpoint would be unreadable
    values = dict(
        name=name,
        original_name=ORIGINAL_NAME,
        original_mount=f"{WORKDIR}/{ORIGINAL_NAME}",
        assets_name=ASSETS_NAME,
        assets_mount=f"{WORKDIR}/{ASSETS_NAME}" if assets else "",
        output=output,
        workdir=WORKDIR,
        interface_lines=[entry.markdown() for entry in interface],
        original_runs=_original_runs(original),
        torch_pin=f"=={pinned_constraint().split('==')[1]}" if original is not None else "",
    )
    (env_dir / "Dockerfile").write_text(_render("Dockerfile.j2", **values))
    text = Path(instruction).read_text() if instruction is not None else _render("instruction.md.j2", **values)
    (root / "instruction.md").write_text(text)
    (root / "task.toml").write_text(
        f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata]\ncategory = "ml-migration"\n'
        'tags = ["pytorch", "jax", "generated"]\n\n[verifier]\ntimeout_sec = 900.0\n\n'
        "[agent]\ntimeout_sec = 3600.0\n\n[environment]\ncpus = 2\nmemory_mb = 4096\nallow_internet = false\n"
        + twin_metadata([Path(p).name for p in probes], [e.function for e in interface if e.function])
        + ("\n" + declaration_toml(original) if original is not None else "")
    )
    tests = root / "tests"
    (tests / "probes").mkdir(parents=True)
    copy_grader_library(tests)
    for probe in probes:
        shutil.copy2(probe, tests / "probes" / Path(probe).name)
    if oracle is not None:
        solution = root / "solution"
        solution.mkdir()
        shutil.copytree(oracle, solution / Path(output).name, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        solve = (TEMPLATES / "solve.sh").read_text().replace("__OUTPUT__", output)
        (solution / "solve.sh").write_text(solve.replace("__NAME__", Path(output).name))
        (solution / "solve.sh").chmod(0o755)


def _original_runs(original: OriginalDistribution | None) -> list[str]:
    """The Dockerfile's RUN steps that fetch a declared original and install its reference environment's lock."""
    if original is None:
        return []
    runs = [dockerfile_fetch_run(original, str(original.mount))]
    if original.dependencies:
        runs += dockerfile_lock_run(build_reference_env(original).lock, held_torch()[0])
    return runs


def grader_library(tests: Path) -> dict[Path, str]:
    """The generated grader's fixed files as they should read now: the template, twin's
    similarity measures, comparison and probe driver, and the t2j-mini sandbox runner."""
    files = {}
    for name, origin in GRADER_FILES.items():
        text = origin.read_text()
        for old, new in REWRITES.items():
            text = text.replace(old, new)
        if name.endswith(".py") and (named := _twin_imports(text)):
            # a grader runs where twin is not installed: a file that still names twin cannot be vendored
            raise TaskError(f"grader file {name} imports {', '.join(named)}: add it to GRADER_FILES and REWRITES")
        files[tests / name] = text
    return files


def _twin_imports(source: str) -> list[str]:
    """The modules of twin's packages that `source` imports (none for a self-contained grader file)."""
    named = []
    for node in ast.walk(ast.parse(source)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        named += [m for m in modules if m.split(".")[0] in TWIN_PACKAGES]
    return sorted(set(named))


def stale_grader_files(tests: Path) -> list[Path]:
    """Fixed files of a generated grader that differ from twin's current ones."""
    return [p for p, text in grader_library(tests).items() if not p.is_file() or p.read_text() != text]


def copy_grader_library(tests: Path) -> list[Path]:
    """Write the generated grader's fixed files into a task's tests/ (`--refresh` does it too).

    Returns the files written (those that differed).
    """
    written = stale_grader_files(tests)
    for path, text in grader_library(tests).items():
        if path in written:
            path.write_text(text)
            if path.suffix == ".sh":
                path.chmod(0o755)
    return written


def _grade_oracle(task: Task, sandbox: str) -> tuple[float, list[str]]:
    """The oracle's reward, and a warning when its grade took over half the verifier's timeout.

    Raises:
        TaskError: the oracle scores below `ORACLE_MIN` (one line, what fell short).
    """
    with oracle_copy(task) as candidate:
        grade = run_grader(task, candidate, sandbox=sandbox)
    if grade.error is not None or grade.reward < ORACLE_MIN:
        why = grade.error or ", ".join(
            f"{k} {numbers.short_of_one(numbers.score(v['score']), v['score'])}"  # 0.9996 never reads 1.000
            for k, v in grade.checks.items()
            if v["score"] < 1
        )
        raise TaskError(f"the oracle scores {grade.reward:.4f} < {ORACLE_MIN} ({why}); nothing written")
    slow = slow_grade_warning(grade.duration_s, task.verifier_timeout_s)
    return grade.reward, [slow] if slow else []


def _refresh(dest: Path, *, sandbox: str, timeout_s: float) -> NewTaskReport:
    """Re-record the references of a task made by `twin task new` (after the original or assets changed)."""
    if not (dest / "tests" / "spec.json").is_file():
        raise TaskError(f"{dest} is not a task made by twin task new (no tests/spec.json)")
    task = load_task(dest)
    old = json.loads((task.tests_dir / "spec.json").read_text())
    # the grader files a failed refresh must put back as they were
    grader_files = {path: path.read_bytes() for path in grader_library(task.tests_dir) if path.is_file()}
    backup = Path(tempfile.mkdtemp(prefix=".refs-", dir=task.tests_dir))
    (task.tests_dir / "refs").mkdir(exist_ok=True)
    shutil.move(task.tests_dir / "refs", backup / "refs")
    try:
        copy_grader_library(task.tests_dir)
        spec = record_references(task, sandbox=sandbox, timeout_s=float(old.get("timeout_s", timeout_s)))
        oracle_reward, warnings = _grade_oracle(task, sandbox) if task.solution_dir is not None else (None, [])
    except BaseException:
        shutil.rmtree(task.tests_dir / "refs", ignore_errors=True)
        shutil.move(backup / "refs", task.tests_dir / "refs")
        (task.tests_dir / "spec.json").write_text(json.dumps(old, indent=2))
        for path, data in grader_files.items():
            path.write_bytes(data)
        shutil.rmtree(backup, ignore_errors=True)
        raise
    shutil.rmtree(backup, ignore_errors=True)
    return NewTaskReport(
        task=dest,
        probes=[p["id"] for p in spec["probes"]],
        oracle_reward=oracle_reward,
        notes=task.environment.notes if task.environment else [],
        warnings=warnings,
    )
