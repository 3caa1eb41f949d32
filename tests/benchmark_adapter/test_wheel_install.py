"""`twin task new` and `twin probe` installed from a wheel, outside the checkout (heavy: builds and installs it).

The wheel is built from a copy of the packages (so the checkout gets no `build/`) and installed
without dependencies into a folder put first on PYTHONPATH of this interpreter, whose own
environment provides the dependencies; nothing of the checkout is importable or readable then.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.defects import apply_defect
from benchmark_adapter.grading.sweep import load_defects

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="recording references needs bwrap"),
]

REPO = Path(__file__).resolve().parents[2]
MLP = REPO / "tasks" / "t2j-mini" / "mlp-train"
PACKAGES = ("ground", "task_model", "harness", "roles", "probes", "prompts", "evidence_store", "benchmark_adapter")


def _pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder holding twin installed from its wheel (and nothing else)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for name in PACKAGES:
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root / "dist"), str(src), cwd=root)
    (wheel,) = (root / "dist").glob("twin_harness-*.whl")
    _pip("install", "--no-deps", "-q", "--target", str(root / "site"), str(wheel), cwd=root)
    shutil.rmtree(src)
    return root / "site"


def _twin(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_a_task_made_from_the_wheel_remembers_its_probes_and_fails_a_broken_port(installed, tmp_path):
    where = subprocess.run(
        [sys.executable, "-c", "import benchmark_adapter, probes; print(benchmark_adapter.__file__, probes.__file__)"],
        env={**os.environ, "PYTHONPATH": str(installed)}, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert str(REPO) not in where.stdout and str(installed) in where.stdout, where.stdout
    shutil.copytree(MLP / "environment" / "source", tmp_path / "src")
    shutil.copytree(MLP / "environment" / "assets", tmp_path / "assets")
    shutil.copy(MLP / "tests" / "probes" / "model.py", tmp_path / "model_probes.py")
    made = _twin(
        installed, tmp_path, "task", "new", "task", "--source", "src", "--assets", "assets",
        "--probe", "model_probes.py", "--interface", "mlp_train.model:MLPClassifier",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert "complete the commented [metadata.twin.interface] entries" in " ".join(made.stdout.split())
    (gelu,) = [d for d in load_defects(REPO / "tests" / "benchmark_adapter" / "defects" / "mlp_train.py")
               if d.name == "gelu-tanh-approximation"]  # fmt: skip
    broken = apply_defect(MLP / "solution" / "app", gelu, tmp_path / "broken")
    probed = _twin(installed, tmp_path, "probe", "--task", "task", "--candidate", str(broken))
    assert probed.returncode == 1, probed.stdout + probed.stderr
    assert any(line.startswith("violated        forward.logits") for line in probed.stdout.splitlines())
    good = _twin(installed, tmp_path, "probe", "--task", "task", "--candidate", str(MLP / "solution" / "app"),
                 "--no-builtin")  # fmt: skip
    assert good.returncode == 0, good.stdout + good.stderr
