"""The shared grading library (benchmark_adapter/grading/templates/grader/grading.py) and the t2j-mini copies."""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
COMMON = REPO / "tasks" / "t2j-mini" / "common"
LIBRARY = REPO / "benchmark_adapter" / "grading" / "templates" / "grader"
requires_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap not installed"
)


def _load(name: str):
    folder = LIBRARY if name == "grading" else COMMON
    if str(LIBRARY) not in sys.path:
        sys.path.append(str(LIBRARY))  # grading.py imports the two files beside it
    spec = importlib.util.spec_from_file_location(f"t2j_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


g = _load("grading")
run_mod = importlib.import_module("grading_run")  # the library's other two files, beside grading.py
box = importlib.import_module("grading_sandbox")
sync = _load("sync")

MEASURES = [
    lambda a, b: g.tensor_similarity(a, b),
    lambda a, b: g.distributional_similarity(a, b),
    lambda a, b: g.exact_agreement(a, b),
]


# ---- similarity measures --------------------------------------------------------------------
@pytest.mark.parametrize("measure", MEASURES)
def test_identical_arrays_score_one(measure):
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    assert measure(x, x.copy()) == pytest.approx(1.0)


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_score_zero(measure, bad):
    x = np.ones((3, 4), dtype=np.float32)
    y = x.copy()
    y[1, 2] = bad
    assert measure(y, x) == 0.0
    assert measure(x, y) == 0.0


@pytest.mark.parametrize("measure", MEASURES)
def test_shape_mismatch_scores_zero(measure):
    assert measure(np.ones((3, 4)), np.ones((4, 3))) == 0.0
    assert measure(np.ones((3, 4)), np.ones((3, 4, 1))) == 0.0


def test_tensor_similarity_sees_uniform_scaling_that_a_cosine_misses():
    x = np.arange(1.0, 10.0)
    assert g.tensor_similarity(2 * x, x) == pytest.approx(math.sqrt(0.5))
    assert g.tensor_similarity(-x, x) == pytest.approx(0.0, abs=1e-3)
    assert g.tensor_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert g.tensor_similarity(np.zeros(3), np.ones(3)) == 0.0


def test_tensor_similarity_decreases_with_error_and_stays_bounded():
    rng = np.random.default_rng(1)
    x = rng.normal(size=1000)
    scores = [
        g.tensor_similarity(x + eps * rng.normal(size=1000), x)
        for eps in (1e-6, 1e-3, 1e-1, 1.0, 10.0)
    ]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > 0.9999 and scores[-1] < 0.8


def test_float64_inputs_are_promoted_to_float32():
    x = np.array([1.0, 2.0, 3.0])
    assert g.tensor_similarity(x + 1e-12, x) == 1.0
    assert g.scalar_similarity(1.0 + 1e-12, 1.0) == 1.0


def test_distributional_similarity_ignores_additive_constant_not_temperature():
    z = np.random.default_rng(2).normal(size=(6, 10))
    assert g.distributional_similarity(z + 5.0, z) == pytest.approx(1.0)
    assert g.distributional_similarity(2.0 * z, z) < 0.95
    assert (
        g.distributional_similarity(np.float32(1.0), np.float32(1.0)) == 0.0
    )  # needs a class axis


def test_scalar_similarity_reaches_zero_at_mean_magnitude():
    assert g.scalar_similarity(1.0, 1.0) == 1.0
    assert g.scalar_similarity(1.1, 1.0) == pytest.approx(1 - 0.2 / 2.1)
    assert g.scalar_similarity(3.0, 1.0) == pytest.approx(0.0, abs=1e-9)
    assert g.scalar_similarity(-1.0, 1.0) == 0.0
    assert g.scalar_similarity([1.0, 2.0], [1.0, 2.0]) == 0.0  # not a scalar
    assert g.scalar_similarity(float("nan"), 1.0) == 0.0


def test_banded_scalar_is_one_inside_the_band_and_scalar_outside():
    assert g.banded_scalar_similarity(1.04, 1.0, band=0.05) == 1.0
    outside = g.banded_scalar_similarity(1.15, 1.0, band=0.05)
    assert outside == pytest.approx(1 - 2 * 0.1 / 2.15)
    assert outside < 1.0
    assert g.banded_scalar_similarity(1.0, 1.0, band=-1.0) == 0.0
    assert g.banded_scalar_similarity(1.0, 1.0, band=float("nan")) == 0.0


def test_exact_agreement_counts_equal_elements():
    assert g.exact_agreement([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert g.exact_agreement([], []) == 1.0
    assert g.exact_agreement([1, 2], [1, 2, 3]) == 0.0


# ---- checks and reward ----------------------------------------------------------------------
def _checks(spec=(1.0,), numeric=(1.0,), behavioral=(1.0,)):
    out = [g.Check(f"s{i}", "spec", 0, s) for i, s in enumerate(spec)]
    out += [g.Check(f"n{i}", "numeric", 1, s) for i, s in enumerate(numeric)]
    out += [g.Check(f"b{i}", "behavioral", 5, s) for i, s in enumerate(behavioral)]
    return out


def test_reward_is_spec_gated_and_renormalized():
    full = g.spec_gated_reward(_checks(), independent=True)
    assert full["reward"] == 1.0
    assert g.spec_gated_reward(_checks(), independent=False)["reward"] == 0.0
    half_spec = g.spec_gated_reward(_checks(spec=(1.0, 0.0)), independent=True)
    assert half_spec["reward"] == pytest.approx(0.5)
    mixed = g.spec_gated_reward(_checks(numeric=(1.0, 0.5), behavioral=(0.0,)), independent=True)
    assert mixed["reward"] == pytest.approx((0.75 + 0.0) / 2)
    numeric_only = g.spec_gated_reward(_checks(numeric=(0.8,), behavioral=()), independent=True)
    assert numeric_only["reward"] == pytest.approx(0.8)
    assert numeric_only["components"]["behavioral"] is None
    assert set(full["checks"]) == {"s0", "n0", "b0"}


def test_check_rejects_unknown_aspect_and_clamps_scores():
    with pytest.raises(ValueError):
        g.Check("x", "style", 0, 1.0)
    assert g.Check("x", "numeric", 1, float("nan")).score == 0.0
    assert g.Check("x", "numeric", 1, 3.0).score == 1.0


def test_write_reward_is_atomic_json(tmp_path):
    path = g.write_reward(tmp_path / "logs", {"reward": 0.5, "components": {}})
    assert path.name == "reward.json"
    assert '"reward": 0.5' in path.read_text()
    assert [p.name for p in path.parent.iterdir()] == ["reward.json"]


# ---- static independence --------------------------------------------------------------------
def test_scan_finds_every_way_of_importing_torch(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "clean.py").write_text(
        "import numpy as np\nimport torchvision_like_name_not\n"
    )
    (tmp_path / "pkg" / "a.py").write_text("import os\nimport torch.nn as nn\n")
    (tmp_path / "pkg" / "b.py").write_text("from torch import tensor\n")
    (tmp_path / "pkg" / "c.py").write_text(
        "import importlib\nm = importlib.import_module('torch')\n"
    )
    (tmp_path / "pkg" / "d.py").write_text(
        "def f():\n    try:\n        import torch\n    except ImportError:\n        pass\n"
    )
    (tmp_path / "pkg" / "e.py").write_text("def broken(:\n")
    findings = g.scan_forbidden_imports(tmp_path, ["torch"])
    files = sorted({f.split(":")[0] for f in findings})
    assert files == ["pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/d.py", "pkg/e.py"]
    assert g.scan_forbidden_imports(tmp_path / "pkg", ["jaxlib"]) == ["e.py:1: does not parse"]


# ---- running the candidate ------------------------------------------------------------------
@pytest.fixture()
def candidate(tmp_path):
    app = tmp_path / "app"
    (app / "pkg").mkdir(parents=True)
    (app / "pkg" / "__init__.py").write_text("VALUE = 7\n")
    secret = tmp_path / "tests" / "refs"
    secret.mkdir(parents=True)
    (secret / "answer.txt").write_text("42")
    return app, secret


@requires_bwrap
def test_driver_sees_candidate_inputs_but_not_grader_files_torch_or_network(candidate):
    app, secret = candidate
    driver = f"""
import os, socket
with section("use"):
    import pkg
    record("value", pkg.VALUE)
    save("doubled", INPUTS["x"] * 2)
    record("param", PARAMS["p"])
with section("secret"):
    record("secret", open({str(secret / "answer.txt")!r}).read())
with section("torch"):
    import torch
with section("net"):
    socket.create_connection(("127.0.0.1", 9), timeout=2)
with section("write_app"):
    open(os.path.join(APP, "x.txt"), "w").write("x")
"""
    run = g.run_candidate(
        driver, app_dir=app, inputs={"x": np.arange(3)}, json_inputs={"p": "q"}, timeout_s=120
    )
    assert run.isolation == "bwrap"
    assert run.finished and run.returncode == 0
    assert run.values["value"] == 7 and run.values["param"] == "q"
    assert run.arrays["doubled"].tolist() == [0, 2, 4]
    assert run.failed("use") is None
    assert "secret" not in run.values and "No such file" in run.errors["secret"]
    assert "No module named 'torch'" in run.errors["torch"]
    assert run.failed("net") is not None
    assert run.failed("write_app") is not None and not (app / "x.txt").exists()
    assert run.leaked == []


@requires_bwrap
def test_timeout_and_crash_are_data_not_exceptions(candidate):
    app, _ = candidate
    slow = g.run_candidate(
        "import time\nwith section('a'):\n    record('a', 1)\ntime.sleep(60)\n",
        app_dir=app,
        timeout_s=3,
    )
    assert slow.timed_out and slow.returncode == 124 and not slow.finished
    crash = g.run_candidate("record('before', 1)\nraise SystemExit(3)\n", app_dir=app, timeout_s=60)
    assert crash.returncode == 3 and not crash.finished
    assert crash.values["before"] == 1  # outputs written at exit even after a failure
    assert "did not run" in crash.failed("later")


def test_without_isolation_the_blocker_still_removes_torch(candidate):
    app, _ = candidate
    run = g.run_candidate(
        "with section('t'):\n    import torch\nrecord('ok', 1)\n",
        app_dir=app,
        timeout_s=120,
        isolation="none",
    )
    assert run.isolation == "none" and run.values["ok"] == 1
    assert "No module named 'torch'" in run.errors["t"]


@requires_bwrap
def test_leaked_modules_are_reported(candidate):
    app, _ = candidate
    # a module compiled into the interpreter cannot be removed from disk: as a stand-in for a
    # forbidden package that slipped through, the runtime check must list it
    run = g.run_candidate("import itertools\n", app_dir=app, timeout_s=60, forbidden=["itertools"])
    assert run.finished and "itertools" in run.leaked


# ---- per-task copies ------------------------------------------------------------------------
def test_every_task_carries_an_identical_copy():
    assert sync.task_test_dirs(), "no t2j-mini task found"
    assert sync.stale_copies() == []


def test_sync_refreshes_a_stale_copy(tmp_path):
    suite = tmp_path / "suite"
    (suite / "t" / "tests").mkdir(parents=True)
    (suite / "t" / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (suite / "t" / "tests" / "grading.py").write_text("old")
    tests = suite / "t" / "tests"
    assert sync.stale_copies(suite) == [tests / "grading.py", tests / "grading_run.py", tests / "grading_sandbox.py"]
    sync.sync(suite)
    assert sync.stale_copies(suite) == []


# ---- outputs the candidate's run left: never read through a link -------------------------------
def test_outputs_linked_to_the_references_gain_nothing(tmp_path):
    refs = tmp_path / "tests" / "refs"
    refs.mkdir(parents=True)
    np.savez(refs / "refs.npz", logits=np.arange(4.0))
    (refs / "refs.json").write_text('{"loss": 1.25}')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "outputs.npz").symlink_to(refs / "refs.npz")
    (scratch / "outputs.json").symlink_to(refs / "refs.json")
    run = g.CandidateRun(returncode=0, timed_out=False, duration_s=0.0)
    run_mod._read_outputs(scratch, run)
    assert run.arrays == {} and run.values == {}


def test_special_and_oversized_outputs_are_refused_without_hanging(tmp_path, monkeypatch):
    import os

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.mkfifo(scratch / "outputs.json")
    with open(scratch / "outputs.npz", "wb") as fh:
        fh.truncate(g.OUTPUT_LIMIT + 1)
    run = g.CandidateRun(returncode=0, timed_out=False, duration_s=0.0)
    run_mod._read_outputs(scratch, run)
    assert run.arrays == {} and run.values == {}
    os.unlink(scratch / "outputs.npz")
    np.savez(scratch / "outputs.npz", a=np.arange(2))
    run_mod._read_outputs(scratch, run)
    assert run.arrays["a"].tolist() == [0, 1]


def test_scratch_of_any_depth_is_removed(tmp_path):
    from tests.fakes.trees import deep_chain

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    deep_chain(scratch, 1200)
    g.remove_scratch(scratch)
    assert not scratch.exists()


def test_flask_grader_reads_its_answers_only_as_a_regular_file(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "flask_serving", COMMON.parents[1] / "flask-to-starlette" / "tests" / "serving.py"
    )
    flask_grade = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flask_grade)
    (tmp_path / "responses.json").write_text('{"up": true}')
    (tmp_path / "answers.json").symlink_to(tmp_path / "responses.json")
    with pytest.raises(OSError):
        flask_grade.read_output(tmp_path / "answers.json")
    (tmp_path / "plain.json").write_text('{"up": true}')
    assert flask_grade.read_output(tmp_path / "plain.json") == b'{"up": true}'


# ---- where the nested bubblewrap cannot start: the uid drop (a default Docker container) ----
needs_root = pytest.mark.skipif(
    __import__("os").geteuid() != 0 or not box._unprivileged_python_works(),
    reason="only root can drop a child to another uid, and this interpreter must run as that uid",
)


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="only root can drop a child to another uid")
def test_uid_drop_fails_closed_where_the_interpreter_does_not_run_as_that_uid(tmp_path, monkeypatch):
    monkeypatch.delenv("LOGS_DIR", raising=False)
    monkeypatch.setattr(box.sys, "executable", str(tmp_path / "no-python"))
    assert "cannot drop" in box.uid_fallback_unavailable([tmp_path])


@needs_root
def test_uid_drop_is_refused_while_the_tests_folder_stays_reachable(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv("LOGS_DIR", raising=False)
    tests = tmp_path / "tests"
    tests.mkdir()
    os.chown(tests, 65534, 65534)  # not root's, so the grader cannot close it: the check decides
    tests.chmod(0o755)
    assert "reachable" in box.uid_fallback_unavailable([tests])
    tests.chmod(0o750)
    assert box.uid_fallback_unavailable([tests]) is None


@needs_root
def test_uid_drop_closes_the_graders_own_folders_first(tmp_path, monkeypatch):
    import os
    import stat

    logs = tmp_path / "logs"
    logs.mkdir(mode=0o777)
    logs.chmod(0o777)
    tests = tmp_path / "tests"
    tests.mkdir(mode=0o755)
    monkeypatch.setenv("LOGS_DIR", str(logs))
    monkeypatch.setattr(box, "in_container", lambda: False)  # on a host: the task's own files, never changed
    assert "writable" in box.uid_fallback_unavailable([tests])
    assert stat.S_IMODE(os.stat(tests).st_mode) == 0o755 and stat.S_IMODE(os.stat(logs).st_mode) == 0o777
    monkeypatch.setattr(box, "in_container", lambda: True)  # Harbor's container: its own copies, at its paths
    monkeypatch.setattr(box, "HARBOR_FOLDERS", (str(tests), str(logs)))
    assert box.uid_fallback_unavailable([tests]) is None
    assert stat.S_IMODE(os.stat(tests).st_mode) == 0o700 and stat.S_IMODE(os.stat(logs).st_mode) == 0o700


def test_uid_drop_is_refused_to_a_grader_that_is_not_root(tmp_path, monkeypatch):
    monkeypatch.setattr(g.os, "geteuid", lambda: 1000)
    assert "not root" in box.uid_fallback_unavailable([tmp_path])


def test_auto_isolation_falls_back_to_the_uid_drop_and_fails_closed_without_it(monkeypatch):
    monkeypatch.setattr(box, "_BWRAP_VARIANT", [[]])  # bubblewrap cannot start here
    monkeypatch.setattr(box, "_UID_FALLBACK", [None])
    assert box._choose_isolation("auto") == "uid"
    with pytest.raises(g.IsolationUnavailable):
        box._choose_isolation("bwrap")
    monkeypatch.setattr(box, "_UID_FALLBACK", ["uid 65532 could reach the grader's files"])
    with pytest.raises(g.IsolationUnavailable, match="nor a uid drop"):
        box._choose_isolation("auto")


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="only root can drop a child to another uid")
def test_a_run_whose_processes_outlive_sigkill_fails_its_isolation(monkeypatch):
    """The session boundary waits for the uid's processes to die; one still running at the deadline is an error."""
    unused_uid = 64999  # no process runs as it: the SIGKILL the dropped child sends reaches nothing
    monkeypatch.setattr(box, "SESSION_END_S", 0.2)
    monkeypatch.setattr(box, "_running_as", lambda uid: 1 if uid == unused_uid else 0)
    with pytest.raises(box.IsolationUnavailable, match="outlived SIGKILL"):
        box.end_candidate_session(unused_uid)
    monkeypatch.setattr(box, "_running_as", lambda uid: 0)
    box.end_candidate_session(unused_uid)  # none left: returns
