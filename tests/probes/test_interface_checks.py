from __future__ import annotations

import shutil

import pytest
from probe_fixtures import TINY

from evidence_store.records import Outcome
from evidence_store.store import EvidenceStore
from harness.scaffolds.twin.probe_desk import RunProbeDesk
from probes.context import make_context
from probes.interface_checks import check_plan, declared_checks, interface_check
from probes.suite import builtin_checks
from task_model.loader import load_task
from task_model.model import TaskError

MODEL = """import jax
import jax.numpy as jnp


def init(key):
    k1, k2 = jax.random.split(key)
    return {
        "a": {"weight": jax.random.normal(k1, (8, 4)), "bias": jnp.zeros(8)},
        "b": {"weight": jax.random.normal(k2, (3, 8)), "bias": jnp.zeros(3)},
    }


def net(params, x):
    h = jnp.tanh(x @ params["a"]["weight"].T + params["a"]["bias"])
    return jnp.tanh(h @ params["b"]["weight"].T + params["b"]["bias"])


def loss_fn(params, x, y):
    return jnp.mean((net(params, x) - y) ** 2)


def convert(params):
    return {"a": dict(params["a"]), "b": dict(params["b"])}
"""
TRAIN = "import model\nprint('trained')\n"
INTERFACE = """
[metadata.twin.interface]
entrypoints = [["python", "train.py"]]

[[metadata.twin.interface.jit]]
function = "model:net"
args = [{call = "model:init", args = [{key = 0}]}, {normal = [2, 4]}]

[metadata.twin.interface.loss]
function = "model:loss_fn"
args = [{call = "model:init", args = [{key = 0}]}, {normal = [8, 4]}, {normal = [8, 3]}]

[metadata.twin.interface.converter]
function = "model:convert"
args = [{call = "model:init", args = [{key = 1}]}]
params = {call = "model:init", args = [{key = 0}]}
"""
IDS = ["interface.jit", "interface.gradients", "interface.param_tree", "interface.entrypoints"]


def _task(tmp_path, interface: str = INTERFACE):
    task = tmp_path / "task"
    shutil.copytree(TINY, task)
    (task / "task.toml").write_text((task / "task.toml").read_text() + interface)
    return task


def _candidate(tmp_path, model: str = MODEL, train: str = TRAIN):
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "model.py").write_text(model)
    (cand / "train.py").write_text(train)
    return cand


def _outcomes(tmp_path, **candidate):
    task = load_task(_task(tmp_path))
    ctx = make_context(task, _candidate(tmp_path, **candidate), sandbox_kind="none", workdir=tmp_path / "w")
    return {r.property.id: r for r in interface_check()(ctx)}


@pytest.mark.heavy  # every declared check on every task
def test_a_correct_candidate_passes_every_declared_check(tmp_path):
    found = _outcomes(tmp_path)
    assert [p.__name__ for p in builtin_checks(load_task(tmp_path / "task"))] == [
        "imports",
        "audit",
        "interface",
    ]
    assert {pid: r.outcome for pid, r in found.items()} == dict.fromkeys(IDS, Outcome.ESTABLISHED)
    assert found["interface.gradients"].property.kind == "grad_liveness"


BROKEN_MODEL = (
    MODEL.replace("    h = jnp", "    if x.sum() > 0:\n        x = -x\n    h = jnp", 1)
    .replace(
        "jnp.mean((net(params, x) - y) ** 2)",
        "jnp.mean((jnp.tanh(x @ params['a']['weight'].T) @ jnp.ones((8, 3)) - y) ** 2)",
    )
    .replace('dict(params["b"])}', 'dict(params["b"], extra=1.0)}')
)


@pytest.mark.heavy  # four defects, each a sandboxed run of the candidate (about 30 s)
def test_each_declared_check_catches_its_defect(tmp_path):
    # one candidate, four defects: a Python branch on a traced value (jit), a loss that never
    # reaches layer b (dead gradients), an extra converted leaf (tree), a failing entry point
    found = _outcomes(tmp_path, model=BROKEN_MODEL, train="import sys\nsys.exit(3)\n")
    assert {pid: r.outcome for pid, r in found.items()} == dict.fromkeys(IDS, Outcome.VIOLATED)
    assert "crashed" in found["interface.jit"].observations["message"]
    assert found["interface.gradients"].observations["message"] == "false: live"
    assert "['b']['weight']" in found["interface.gradients"].observations["values"]["dead_leaves"]
    assert found["interface.param_tree"].observations["message"] == "false: same_paths"
    assert found["interface.param_tree"].observations["values"]["extra"] == "['b']['extra']"
    assert found["interface.entrypoints"].observations["message"] == "false: 0.exits_zero"


def test_without_a_declared_interface_run_checks_says_what_it_did_not_run(tmp_path):
    task = load_task(TINY)
    assert declared_checks(task) == [] and [p.__name__ for p in builtin_checks(task)] == [
        "imports",
        "audit",
    ]
    ran, skipped = check_plan(task)
    assert ran == ["imports", "independence", "audit.wrapping", "audit.vendored", "audit.transliteration"]
    assert [line.split(":")[0] for line in skipped] == [
        "jit-traceability",
        "gradients",
        "parameter tree",
        "entry points",
    ]
    store = EvidenceStore(tmp_path / "e.sqlite")
    desk = RunProbeDesk(
        task, _candidate(tmp_path), tmp_path / "probes", store, run_id="r", sandbox_kind="none", audit_log=None
    )
    (tmp_path / "cand" / "model.py").write_text("import numpy\n")
    text = desk.run_checks()
    assert "ran: imports, independence, audit.wrapping" in text
    assert "- gradients: no loss declared in [metadata.twin.interface] of the task" in text
    assert {r.property.id for r in store.records()} == set(ran)


def test_with_a_declared_interface_run_checks_lists_the_derived_checks(tmp_path):
    task = load_task(_task(tmp_path))
    ran, skipped = check_plan(task)
    assert ran[-4:] == IDS and skipped == []


def test_a_malformed_interface_is_one_clear_error(tmp_path):
    with pytest.raises(TaskError, match=r"interface\.jit\.0\.function.*not 'module:function'"):
        load_task(_task(tmp_path, '\n[metadata.twin.interface]\njit = [{function = "net"}]\n'))
