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


def test_probes_running_at_once_build_a_sides_sandbox_once(tmp_path, monkeypatch):
    """Two probes asking at once for the candidate side's sandbox get the one sandbox: two builds
    would cap and present the same work directory at the same time."""
    import threading
    import time

    from probes import context as context_module

    built = []
    real_make = context_module.make_sandbox

    def slow_make(kind, boundary):
        built.append(boundary)
        time.sleep(0.3)  # the window in which a second thread would start a build of its own
        return real_make(kind, boundary)

    monkeypatch.setattr(context_module, "make_sandbox", slow_make)
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path)
    got = []
    threads = [threading.Thread(target=lambda: got.append(ctx.sandbox("candidate"))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctx.close()
    assert len(built) == 1 and len(got) == 2 and got[0] is got[1]
