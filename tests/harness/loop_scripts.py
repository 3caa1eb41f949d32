"""Scripted model plans that drive whole runs on the tiny-calc fixture task.

These are scripted replies (labelled 'scripted' in every output), used to test the
loop's mechanics; they are not a model's work.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_TASK = REPO / "tests" / "fixtures" / "tasks" / "tiny-calc"

INIT = '"""calc, migrated."""\n'
OPS_GOOD = (
    "import numpy as np\n\n\ndef add(a, b):\n    return np.add(a, b)\n\n\n"
    "def scale(x, k):\n    return np.multiply(x, k)\n"
)
OPS_BUGGY = OPS_GOOD.replace("np.multiply(x, k)", "np.multiply(x, k + 1)")
PROBE = """PROBES = {"calc_ops": {"id": "calc.ops", "level": 1, "description": "add and scale match the original"}}


def inputs(env):
    return {"x": env.rng.normal(size=(5,)), "k": 3.0}


def reference(env):
    from calc import ops
    return {"sum": ops.add(env.inputs["x"], env.inputs["x"]), "scaled": ops.scale(env.inputs["x"], env.inputs["k"])}


def candidate(env):
    from calc import ops
    return {"sum": ops.add(env.inputs["x"], env.inputs["x"]), "scaled": ops.scale(env.inputs["x"], env.inputs["k"])}
"""


def call(tool: str, **arguments) -> dict:
    return {
        "tool_calls": [{"name": tool, "arguments": arguments}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20},
    }


def diagnose(complete: bool = False) -> dict:
    return call(
        "submit",
        diagnosis={
            "summary": "calc needs migrating" if not complete else "nothing left",
            "gaps": [] if complete else [{"title": "port calc.ops", "objective": "write /app/calc", "evidence": []}],
            "complete": complete,
        },
    )


def migrate(ops: str) -> list[dict]:
    return [
        call("write_file", path="/app/calc/__init__.py", content=INIT),
        call("write_file", path="/app/calc/ops.py", content=ops),
        call("submit", summary="wrote calc"),
    ]


def verify_with_new_probe() -> list[dict]:
    return [
        call("write_probe", name="calc_ops", source=PROBE),
        call("submit", summary="probed calc.ops"),
    ]


def verify_again() -> list[dict]:
    return [call("submit", summary="re-ran the probes")]


def twin_fix_in_round_two() -> list[dict]:
    """Round 1 migrates with a bug the probe catches; round 2 fixes it."""
    return [
        diagnose(),
        *migrate(OPS_BUGGY),
        *verify_with_new_probe(),
        diagnose(),
        call("edit_file", path="/app/calc/ops.py", old="k + 1", new="k"),
        call("submit", summary="fixed scale"),
        *verify_again(),
    ]


def twin_regress_in_round_two() -> list[dict]:
    """Round 1 is right; round 2 breaks scale: the run must end on round 1."""
    return [
        diagnose(),
        *migrate(OPS_GOOD),
        *verify_with_new_probe(),
        diagnose(),
        call("edit_file", path="/app/calc/ops.py", old="np.multiply(x, k)", new="np.multiply(x, k + 1)"),
        call("submit", summary="refactored scale"),
        *verify_again(),
    ]


LEGACY = "import torch\n"
"""A module the migration left behind: twin's candidate-side import check finds it (torch is absent there)."""


def base_two_rounds() -> list[dict]:
    """Round 1 submits a bug and a module that imports torch; shown that failing check, round 2 fixes both."""
    return [
        call("write_file", path="/app/calc/__init__.py", content=INIT),
        call("write_file", path="/app/calc/ops.py", content=OPS_BUGGY),
        call("write_file", path="/app/calc/legacy.py", content=LEGACY),
        call("submit", summary="wrote calc"),
        call("bash", command="rm /app/calc/legacy.py"),
        call("edit_file", path="/app/calc/ops.py", old="k + 1", new="k"),
        call("submit", summary="fixed"),
    ]


def base_submits_once() -> list[dict]:
    """The agent submits a clean candidate in round 1; the reply after it must never be asked for."""
    return [*migrate(OPS_GOOD), call("submit", summary="asked again without a reason")]


def write_script(path: Path, replies: list[dict]) -> str:
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def twin_with_slow_migration(seconds: int) -> list[dict]:
    """Like `twin_fix_in_round_two`, but round 1's Migrator runs a slow command after writing."""
    replies = twin_fix_in_round_two()
    slow = call("bash", command=f"sleep {seconds}")
    replies.insert(3, slow)  # after the two writes, before the Migrator submits
    return replies
