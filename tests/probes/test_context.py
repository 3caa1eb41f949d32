from __future__ import annotations

import sys

import pytest
from probe_fixtures import CANDIDATES, TINY

from probes.context import ProbeOptionError, make_context
from task_model.loader import load_task
from tests.conftest import requires_bwrap


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "tpu"}, "--device must be one of"),
        ({"precision": "fp8"}, "--precision must be one of"),
        ({"sandbox_kind": "docker"}, "--sandbox must be one of"),
        ({"colour": "red"}, "unknown probe option"),
    ],
)
def test_bad_options(options, message, tmp_path):
    with pytest.raises(ProbeOptionError, match=message):
        make_context(load_task(TINY), CANDIDATES / "good", workdir=tmp_path, **options)


def test_missing_candidate(tmp_path):
    with pytest.raises(ProbeOptionError, match="candidate directory not found"):
        make_context(load_task(TINY), tmp_path / "nope")


def test_roots_and_policy(tmp_path):
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    assert ctx.roots("reference")["candidate"] is None
    assert ctx.roots("candidate")["source"] is None
    assert ctx.roots("candidate")["candidate"] == str(ctx.candidate)
    assert ctx.forbidden("candidate") == ["torch"] and ctx.forbidden("reference") == []
    env = ctx.side_env()
    assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    assert (
        make_context(load_task(TINY), CANDIDATES / "good", precision="bf16", workdir=tmp_path).dtype
        == "bfloat16"
    )


@requires_bwrap
def test_bwrap_sides_hide_torch_source_and_hidden_files(tmp_path):
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="bwrap", workdir=tmp_path)
    assert ctx.roots("candidate")["candidate"] == "/app"
    script = (
        "import importlib.util, os\n"
        "print(importlib.util.find_spec('torch') is None, os.path.exists('/source'),"
        " os.path.exists('/app/model.py'), os.path.exists('/assets/info.json'))\n"
    )

    result = ctx.sandbox("candidate").exec([sys.executable, "-c", script])
    assert result.ok, result.stderr
    assert result.stdout.split() == ["True", "False", "True", "True"]
    ref = ctx.sandbox("reference").exec(
        [
            sys.executable,
            "-c",
            "import os; print(os.path.exists('/source/model.py'),"
            " os.path.exists('/app'), os.listdir('/source'))",
        ]
    )
    assert ref.ok, ref.stderr
    assert ref.stdout.startswith("True False")
    ctx.close()


def test_a_deadline_cuts_every_side_to_what_is_left(tmp_path):
    import time

    task, good = load_task(TINY), CANDIDATES / "good"
    assert make_context(task, good, sandbox_kind="none", workdir=tmp_path).side_limit(600.0) == 600.0
    ctx = make_context(task, good, sandbox_kind="none", workdir=tmp_path, deadline=time.monotonic() + 5.0)
    assert 0 < ctx.side_limit(600.0) <= 5.0
    assert ctx.side_limit(1.0) == 1.0
    late = make_context(task, good, sandbox_kind="none", workdir=tmp_path, deadline=time.monotonic() - 1.0)
    assert late.side_limit(600.0) == 0.0
