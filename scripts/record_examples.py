"""Record the bundled example trajectories in `examples/<task>/<scaffold>.jsonl`.

The examples are SCRIPTED demonstrations of the loop's mechanics, not a model's
work: the scripted replies write the task's oracle with one seeded defect (from
twin's own defect lists), the Verifier writes probes from the task's own probe files,
and the next round repairs the defect. Replaying a recording (`--model
replay:examples/…`) reproduces the run without any model, and every output of
such a run says it is replayed.

Run it again whenever a prompt or tool changes (the replay then reports where the
requests diverge):

    .venv/bin/python scripts/record_examples.py [TASK ...]
"""

from __future__ import annotations

import ast
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark_adapter.grading.defects import Defect  # noqa: E402
from harness.run.directory import RunConfig  # noqa: E402
from harness.run.migration import run_migration  # noqa: E402
from harness.run.session import RunInputs  # noqa: E402
from harness.scaffolds.registry import SCAFFOLDS  # noqa: E402
from task_model.loader import load_task  # noqa: E402

TASKS = REPO / "tasks" / "t2j-mini"
EXAMPLES = REPO / "examples"
DEMO_DEFECT = {
    "mlp-train": "converter-norm-swap",
    "llama-lora-sft": "rotary-half-sign",
    "llama-paged-serve": "rotary-interleaved",
}
DEMO_PROBES = {"mlp-train": ["model"], "llama-lora-sft": ["modeling"], "llama-paged-serve": ["kernels"]}


def call(tool: str, **arguments) -> dict:
    return {
        "tool_calls": [{"name": tool, "arguments": arguments}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0},
    }


def defect_of(task: str) -> Defect:
    module = importlib.import_module(f"tests.benchmark_adapter.defects.{task.replace('-', '_')}")
    return next(d for d in module.DEFECTS if d.name == DEMO_DEFECT[task])


def oracle_files(task: str, defect: Defect) -> dict[str, str]:
    root = TASKS / task / "solution" / "app"
    files = {}
    for path in sorted(root.rglob("*")):
        if (
            path.is_file()
            and "__pycache__" not in path.parts
            and path.suffix in (".py", ".json", ".toml", ".md", ".txt")
        ):
            rel = str(path.relative_to(root))
            text = path.read_text()
            files[rel] = text.replace(defect.old, defect.new) if rel == defect.file else text
    return files


def probe_files(task: str) -> dict[str, str]:
    """The demonstration's probe files, from the task's own (its `tests/probes/`, listed in its task.toml)."""
    own = TASKS / task / "tests" / "probes"
    return {name: (own / f"{name}.py").read_text() for name in DEMO_PROBES[task]}


def probed_ids(probes: dict[str, str]) -> list[str]:
    """The property ids the probe files state: what the repair diagnosis asks to see established
    (its Diagnoser names the properties that show the repair, as its prompt asks)."""
    ids = []
    for source in probes.values():
        tree = ast.parse(source)
        literal = next(
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "PROBES" for t in node.targets)
        )
        ids += [meta.get("id", name) for name, meta in ast.literal_eval(literal).items() if not meta.get("planted")]
    return ids


def twin_plan(task: str) -> list[dict]:
    defect = defect_of(task)
    probes = probe_files(task)
    diagnosis = {
        "summary": "Nothing is migrated yet.",
        "gaps": [
            {
                "title": "migrate the package",
                "objective": "write the JAX package in /app mirroring /source",
                "evidence": [],
                "probes": ["forward passes against the original"],
                "priority": 1,
            }
        ],
        "complete": False,
    }
    replies = [call("read_file", path="/source"), call("submit", diagnosis=diagnosis)]
    replies += [
        call("write_file", path=f"/app/{rel}", content=text) for rel, text in oracle_files(task, defect).items()
    ]
    replies += [call("submit", summary="wrote the JAX package")]
    # twin ran the built-in checks before the Verifier's turn, and writing a probe runs it
    replies += [call("write_probe", name=f"{name}_probes", source=source) for name, source in probes.items()]
    replies += [
        call(
            "submit",
            summary="checked the candidate and probed the model against the original",
            unchecked=["training end to end: this demonstration probes the model only"],
        )
    ]
    fix = {
        "summary": f"A probe of {defect.component} is violated.",
        "gaps": [
            {
                "title": f"{defect.component} diverges from the original",
                "objective": defect.description or "repair it",
                "evidence": [],
                "probes": probed_ids(probes),
                # the original's definition, handed to the Migrator in its task message
                "sources": [f"/source/{defect.file}:{defect.component.split('.')[-1]}"],
                "priority": 1,
            }
        ],
        "complete": False,
    }
    replies += [call("submit", diagnosis=fix)]
    replies += [
        call("edit_file", path=f"/app/{defect.file}", old=defect.new, new=defect.old),
        call("submit", summary="repaired"),
    ]
    # round 2's re-run of the model probes shows the repair: no Verifier is called
    return replies


def base_plan(task: str) -> list[dict]:
    """One round: the agent writes the package with the seeded defect and submits. twin's candidate-side
    checks find nothing violated (the defect is numeric), so no second round is asked for."""
    defect = defect_of(task)
    replies = [call("read_file", path="/source")]
    replies += [
        call("write_file", path=f"/app/{rel}", content=text) for rel, text in oracle_files(task, defect).items()
    ]
    replies += [call("submit", summary="wrote the JAX package")]
    return replies


def shell_write(rel: str, text: str) -> dict:
    """A bash call that writes /app/<rel> with a quoted here-document."""
    assert "\nTWIN_EOF\n" not in text
    folder = str(Path("/app", rel).parent)
    return call("bash", command=f"mkdir -p {folder} && cat > /app/{rel} <<'TWIN_EOF'\n{text}TWIN_EOF")


def mini_swe_agent_plan(task: str) -> list[dict]:
    """mini-swe-agent has one tool, bash, and submits by echoing its completion marker; one round, as base."""
    defect = defect_of(task)
    submit = call("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    replies = [call("bash", command="ls -R /source /assets | head -50")]
    replies += [shell_write(rel, text) for rel, text in oracle_files(task, defect).items()]
    replies += [submit]  # nothing violated on the candidate side: no second round (as for base)
    return replies


PLANS = {"twin": twin_plan, "base": base_plan, "mini-swe-agent": mini_swe_agent_plan}
RECORDED = {"twin": list(DEMO_DEFECT), "base": list(DEMO_DEFECT), "mini-swe-agent": ["mlp-train"]}


def record(task: str, scaffold: str) -> Path:
    import json

    loaded = load_task(TASKS / task)
    plan = PLANS[scaffold](task)
    with tempfile.TemporaryDirectory(prefix="twin-record-") as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(plan))
        config = RunConfig.build(task=TASKS / task, model=f"scripted:{script}", scaffold=scaffold, rounds=2, grade=True)
        inputs = RunInputs.create(Path(tmp) / "runs", config, loaded, "record")
        run = inputs.run
        print(run_migration(inputs, SCAFFOLDS))
        out = EXAMPLES / task / f"{scaffold}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(run.trajectory, out)
        # the grades a replay must reach (tests/harness/test_examples.py, slow suite)
        grades = json.loads(run.grades.read_text())
        rewards = {str(g["round"]): g["reward"] for g in grades["rounds"]}
        out.with_suffix(".grades.json").write_text(json.dumps(rewards, indent=2) + "\n")
    return out


def main(argv: list[str]) -> int:
    for task in argv or list(DEMO_DEFECT):
        for scaffold, tasks in RECORDED.items():
            if task in tasks:
                print(f"recorded {record(task, scaffold)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
