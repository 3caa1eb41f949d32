"""`twin task new --include-closure`: a task whose original is a module's import closure in a distribution."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib

import pytest

from harness.cli.app import main
from task_model.distribution import materialize
from task_model.distribution_install import declare_from_index
from task_model.import_closure import wheel_selection
from task_model.loader import load_task
from task_model.model import TaskError
from tests.fakes.deep_package import FILES, VISION_CLOSURE, ZOO_MODELS
from tests.fakes.wheels import build_wheel

PROBE = '''\
"""deeppkg's vision model against the original."""

PROBES = {"vision": {"level": 1, "component": "deeppkg.models.vision.VisionNet", "description": "The block's output."}}


def inputs_vision(env):
    return {"x": env.rng.standard_normal((2, 3, 8)).astype("float32")}


def reference_vision(env):
    import torch
    from deeppkg.models.vision import VisionNet

    torch.manual_seed(0)
    dtype = getattr(torch, env.dtype)
    model = VisionNet(8).to(dtype)
    with torch.no_grad():
        return {"y": model(torch.tensor(env.inputs["x"], dtype=dtype))}


def candidate_vision(env):
    raise NotImplementedError("the port's side")
'''
NORM_PROBE = '''\
"""deeppkg's norm against the original."""

PROBES = {"norm": {"level": 1, "component": "deeppkg.layers.norm.Norm", "description": "The normalised rows."}}


def inputs_norm(env):
    return {"x": env.rng.standard_normal((4, 8)).astype("float32")}


def reference_norm(env):
    import torch
    from deeppkg.layers.norm import Norm

    dtype = getattr(torch, env.dtype)
    with torch.no_grad():
        return {"y": Norm(8).to(dtype)(torch.tensor(env.inputs["x"], dtype=dtype))}


def candidate_norm(env):
    import numpy
    from norm_port import norm

    return {"y": norm(numpy.asarray(env.inputs["x"]))}
'''
# a port whose epsilon is 1e-4, not the original's 1e-6: off by about 5e-05, a similarity that reads 1.0
NORM_PORT = "import numpy\n\n\ndef norm(x):\n    return x / numpy.sqrt((x * x).mean(-1, keepdims=True) + 1e-4)\n"
TORCH_ONLY_PROBE = '''\
PROBES = {"tanh": {"level": 1, "component": "torch.tanh", "description": "A placeholder: the layout is tested."}}


def inputs_tanh(env):
    return {"x": env.rng.standard_normal((2, 3)).astype("float32")}


def reference_tanh(env):
    import torch

    return {"y": torch.tanh(torch.tensor(env.inputs["x"], dtype=getattr(torch, env.dtype)))}


def candidate_tanh(env):
    raise NotImplementedError
'''
INTERFACE = """\
deeppkg.models.vision  # the vision model
  class VisionNet(dim=8, hidden=16)  # attention and an MLP over [batch, tokens, dim]
    forward(x) -> y [batch, tokens, dim]  # the block
  vision_tiny(**kwargs) -> VisionNet  # the registered configuration
"""


def test_task_new_lays_out_the_closure_says_its_size_and_records_from_it(local_index, tmp_path, capsys):
    build_wheel(local_index, FILES, name="deeppkg", version="1.0")
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "interface.txt").write_text(INTERFACE)
    dest = tmp_path / "vision"
    args = ["task", "new", str(dest), "--source", "pypi:deeppkg==1.0", "--include-closure", "deeppkg.models.vision",
            "--probe", str(tmp_path / "probe.py"), "--interface", str(tmp_path / "interface.txt"),
            "--sandbox", "none"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    lines = sum(FILES[p].count("\n") for p in VISION_CLOSURE)
    assert f"closure of deeppkg.models.vision: {len(VISION_CLOSURE)} modules, {lines:,} lines," in out
    assert "T2J tasks: about 4,000 lines" in out and "warning" not in out
    declared = tomllib.loads((dest / "task.toml").read_text())["metadata"]["twin"]["original"]
    assert declared["files"] == VISION_CLOSURE  # the reference side imported it: nothing it needs is missing
    assert (dest / "tests" / "refs").is_dir()
    instruction = (dest / "instruction.md").read_text()
    assert "    - `class VisionNet(dim=8, hidden=16)`: attention and an MLP over [batch, tokens, dim]" in instruction
    assert '# function = "deeppkg.models.vision:vision_tiny"' in (dest / "task.toml").read_text()


def test_excluded_files_leave_the_declaration_and_a_wrong_module_is_one_line(local_index, tmp_path, capsys):
    wheel = build_wheel(local_index, FILES, name="deeppkg", version="1.0")
    said: list[str] = []
    select = wheel_selection(["deeppkg.layers.norm"], [], ["deeppkg/models/zoo.py"], said.append)
    original = declare_from_index("pypi:deeppkg==1.0", [], select=select)
    assert "deeppkg/models/zoo.py" not in original.files and "deeppkg/utils/helpers.py" in original.files
    laid_out = materialize(original)
    assert sorted(str(p.relative_to(laid_out)) for p in laid_out.rglob("*.py")) == sorted(original.files)
    assert said[0].startswith("closure of deeppkg.layers.norm:")
    assert wheel.is_file()
    (tmp_path / "probe.py").write_text(PROBE)
    args = ["task", "new", str(tmp_path / "t"), "--source", "pypi:deeppkg==1.0", "--include-closure", "deeppkg.nope",
            "--probe", str(tmp_path / "probe.py"), "--interface", "f"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--include-closure deeppkg.nope: deeppkg-1.0-py3-none-any.whl has no such module")
    assert len(err.splitlines()) == 1 and not (tmp_path / "t").exists()
    source = ["--source", str(tmp_path), "--include-closure", "deeppkg.models"]
    assert (
        main(["task", "new", str(tmp_path / "t"), *source, "--probe", str(tmp_path / "probe.py"), "--interface", "f"])
        == 2
    )
    assert "as --include-closure and --exclude do" in capsys.readouterr().err


@pytest.mark.slow
def test_timms_vision_transformer_closure_is_laid_out_and_sized(tmp_path, monkeypatch, capsys):
    """`twin task new --source pypi:timm==1.0.31 --include-closure timm.models.vision_transformer`, from the
    package index (skipped without one that serves it). The probe here runs torch alone: importing timm
    itself needs its companion torchvision in the reference environment, which is not what this tests."""
    monkeypatch.setenv("TWIN_CACHE_DIR", str(tmp_path / "cache"))
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(tmp_path / "w"),
         "timm==1.0.31"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip("no package index serves timm 1.0.31 here")
    shutil.rmtree(tmp_path / "w")
    (tmp_path / "probe.py").write_text(TORCH_ONLY_PROBE)
    dest = tmp_path / "vit"
    args = ["task", "new", str(dest), "--source", "pypi:timm==1.0.31",
            "--include-closure", "timm.models.vision_transformer", "--probe", str(tmp_path / "probe.py"),
            "--interface", "timm.models.vision_transformer:vit_tiny_patch16_224", "--sandbox", "none"]  # fmt: skip
    code = main(args)
    out, err = capsys.readouterr()
    assert "closure of timm.models.vision_transformer: " in out and "(T2J tasks: about 4,000 lines" in out
    assert "warning: the closure is " in out and "timm.models (timm/models/__init__.py" in out
    if code != 0 and "torchvision is not installed in twin's environment" in err:
        pytest.skip("the closure was sized; the task needs timm's companion torchvision in twin's environment")
    assert code == 0, err
    files = tomllib.loads((dest / "task.toml").read_text())["metadata"]["twin"]["original"]["files"]
    assert {"timm/__init__.py", "timm/models/__init__.py", "timm/models/vision_transformer.py"} <= set(files)
    laid_out = load_task(dest).source_dir
    assert (laid_out / "timm" / "models" / "vision_transformer.py").is_file()
    assert sorted(str(p.relative_to(laid_out)) for p in laid_out.rglob("*.py")) == sorted(files)


@pytest.mark.heavy  # makes a task, then grades a port in the generated grader's nested sandbox
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the generated grader needs bwrap")
def test_a_port_a_little_off_reads_as_failing_with_how_far_never_a_score_of_one(local_index, tmp_path, capsys):
    from benchmark_adapter.grading.grader import run_grader
    from task_model.loader import load_task

    build_wheel(local_index, FILES, name="deeppkg", version="1.0")
    (tmp_path / "norm.py").write_text(NORM_PROBE)
    dest = tmp_path / "norm"
    args = ["task", "new", str(dest), "--source", "pypi:deeppkg==1.0", "--include-closure", "deeppkg.layers.norm",
            "--probe", str(tmp_path / "norm.py"), "--interface", "norm_port:norm(x)", "--sandbox", "none"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    port = tmp_path / "port"
    port.mkdir()
    (port / "norm_port.py").write_text(NORM_PORT)
    grade = run_grader(load_task(dest), port, sandbox="bwrap")
    (check,) = [c for name, c in grade.checks.items() if "norm" in name]
    detail = check["detail"]
    assert check["score"] < 1 and "y: tensor fails: distance " in detail, detail
    times = float(detail.split("(")[1].split("× the tolerance")[0])
    assert times > 1 and " score " not in detail, detail  # how far out, never a similarity that rounds to 1


def test_includes_alone_are_sized_and_a_large_set_is_warned_of(local_index, monkeypatch):
    from task_model import import_closure

    wheel = build_wheel(local_index, FILES, name="deeppkg", version="1.0")
    monkeypatch.setattr(import_closure, "LARGE_LINES", 100)
    said: list[str] = []
    chosen = wheel_selection([], ["deeppkg/models"], [], said.append)(wheel)
    models = [p for p in FILES if p.startswith("deeppkg/models/")]
    lines = sum(FILES[p].count("\n") for p in models)
    assert chosen == ["deeppkg/models"]
    torch_lines = 2 + 3 * ZOO_MODELS  # VisionNet(nn.Module), torch.mean; per zoo model nn.Module, nn.Linear, torch.tanh
    assert said[0] == (
        f"declared: {len(models)} modules, {lines:,} lines, {torch_lines} using torch "
        "(T2J tasks: about 4,000 lines in 15-20 modules)"
    )
    assert said[1].startswith(f"warning: the original is {lines:,} lines, over 100:") and "--include-closure" in said[1]
    with pytest.raises(TaskError, match="--include deeppkg/nope: deeppkg-1.0-py3-none-any.whl has no such file"):
        wheel_selection([], ["deeppkg/nope"], [], said.append)(wheel)
