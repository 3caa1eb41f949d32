from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from probe_fixtures import CANDIDATES, TINY

from evidence_store.records import Outcome
from probes.audit import audit_candidate
from probes.checks import audit_check, imports_check
from probes.context import make_context
from probes.foreign_files import MAX_FILE_BYTES, file_kind, foreign_findings, walk
from task_model.loader import load_task

REPO = Path(__file__).resolve().parents[2]
SOURCE = TINY / "environment" / "source"
MARKERS = ["/source/"]

# Each kind of non-Python file that pulls the framework: (path, text, line of the finding).
PULLS = [
    ("run.sh", "#!/bin/sh\necho start\npython -c 'import torch; print(torch.__version__)'\n", 3),
    ("run.sh", 'set -e\npython3 -c "from torch.nn import Linear"\n', 2),
    ("install.sh", "echo hi\nsudo pip install -U 'torch>=2.0' numpy\n", 2),
    ("install.sh", "python -m pip install --index-url https://x.test/simple torch\n", 1),
    ("install.sh", "uv pip install torch==2.1\n", 1),
    ("install.sh", "conda install -y pytorch\n", 1),
    ("bin/start", "#!/usr/bin/env bash\nenv X=1 python -c 'import torch'\n", 2),
    ("heredoc.sh", "python - <<EOF\nimport numpy\nimport torch\nEOF\n", 3),
    ("heredoc.sh", "cat <<'EOF' | python3 -u -\nimport torch\nEOF\n", 2),
    ("pipe.sh", "echo ok\necho 'import torch' | python\n", 2),
    ("pipe.sh", "printf 'import os\\nimport torch\\n' | python3 -\n", 1),
    ("nested.sh", "echo\nbash -c 'echo x; pip install torch'\n", 2),
    ("nested.sh", "sh -c \"echo\n python -c 'import torch'\"\n", 2),
    ("install.sh", "uv add torch\n", 1),
    ("csrc/ext.cpp", "// a kernel\n#include <vector>\n#include <torch/extension.h>\n", 3),
    ("csrc/ops.cc", '#include "ATen/ATen.h"\n', 1),
    ("csrc/kernel.cu", "#include <c10/cuda/CUDAStream.h>\n__global__ void k() {}\n", 1),
    ("csrc/ops.h", "#pragma once\n#include <torch/torch.h>\n", 2),
    ("csrc/ops.hpp", "#include <torch/script.h>\n", 1),
    ("csrc/plain.c", "#include <stdio.h>\n#include <ATen/ATen.h>\n", 2),
    (
        "setup.py",
        "from setuptools import setup\nsetup(\n    name='x',\n    install_requires=['numpy', 'torch>=2'],\n)\n",
        4,
    ),
    ("setup.py", "import setuptools\nsetuptools.setup(extras_require={'ckpt': ['torch']})\n", 2),
    ("setup.py", "from setuptools import setup\nREQUIRES = [\n  'torch',\n]\nsetup(install_requires=REQUIRES)\n", 3),
    ("pyproject.toml", '[project]\nname = "x"\ndependencies = [\n  "jax",\n  "torch>=2.1",\n]\n', 5),
    ("pyproject.toml", '[build-system]\nrequires = ["setuptools", "torch"]\n', 2),
    ("pyproject.toml", '[tool.poetry.dependencies]\npython = "^3.11"\ntorch = "^2"\n', 3),
    ("requirements.txt", "numpy\n# pinned\ntorch==2.1.0  # cpu\n", 3),
    ("requirements-dev.txt", "-r requirements.txt\nTorch[opt]>=2\n", 2),
    ("setup.cfg", "[metadata]\nname = x\n\n[options]\ninstall_requires =\n    numpy\n    torch\n", 7),
    ("CMakeLists.txt", "project(x)\nfind_package(Torch REQUIRED)\n", 2),
    ("requirements.txt", "jax\n-e git+https://example.test/pytorch.git#egg=torch\n", 2),
    ("pyproject.toml", '[project]\nname = "x"\n[dependency-groups]\ndev = ["pytest", "torch"]\n', 4),
    ("environment.yml", "name: x\ndependencies:\n  - python=3.11\n  - pytorch::pytorch=2.1\n", 4),
    ("environment.yml", "dependencies:\n  - pip\n  - pip:\n    - jax\n    - torch>=2\n", 5),
]

# The same kinds of file, without the framework or naming it only in comments and unexecuted strings.
CLEAN = [
    (
        "run.sh",
        "#!/bin/sh\n# we no longer use torch\n# pip install torch\necho 'torch is gone'\npython -c 'import jax'\n",
    ),
    ("install.sh", "pip install jax flax  # instead of torch\nprintf 'import torch\\n' > notes.txt\n"),
    ("echo.sh", "echo pip install torch\necho python -c 'import torch'\nbash -c 'echo pip install torch'\n"),
    ("pipe.sh", "echo 'import torch' | grep torch\necho 'import torch' | python script.py\n"),
    ("heredoc.sh", "cat <<EOF | python app.py\nimport torch\nEOF\n"),
    ("bin/start", "#!/bin/bash\n: 'python -c \"import torch\"'\npython -m app\n"),
    ("heredoc.sh", "cat <<EOF\nimport torch\nEOF\npython - <<EOF\n# import torch\nimport numpy\nEOF\n"),
    (
        "csrc/ext.cpp",
        "// port of torch code\n/* #include <torch/extension.h> */\n#include <vector>\n"
        'const char* s = "#include <torch/torch.h>";\n',
    ),
    ("csrc/plain.c", '/* was torch/csrc */\n#include <stdio.h>\n#include "torchlike.h"\n'),
    (
        "setup.py",
        "from setuptools import setup\n# torch is gone\n"
        "setup(name='x', description='no torch', install_requires=['jax'])\n",
    ),
    (
        "pyproject.toml",
        '[project]\nname = "x"\n# "torch" was here\ndescription = "torch-free"\ndependencies = ["jax"]\n',
    ),
    ("requirements.txt", "jax  # see #egg=torch\n"),
    ("requirements.txt", "# torch\njax  # replaces torch\ntorchvision-free-shim-not-a-thing==1; python_version<'3'\n"),
    ("setup.cfg", "[metadata]\ndescription = ported from torch\n\n[options]\ninstall_requires =\n    jax\n"),
    ("CMakeLists.txt", "project(x)\n# find_package(Torch REQUIRED)\nfind_package(Python)\n"),
    ("environment.yml", "name: torch-free\n# - pytorch\ndependencies:\n  - jax\n  - pip:\n    - flax\n"),
    ("README.sh.txt", "pip install torch\n"),
]


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(("rel", "text", "line"), PULLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(PULLS)])
def test_each_kind_of_file_that_pulls_the_framework_is_found(tmp_path, rel, text, line):
    _write(tmp_path, rel, text)
    findings = foreign_findings(tmp_path, ["torch"], markers=MARKERS)
    assert [(f.kind, f.file, f.line) for f in findings] == [("forbidden_import", rel, line)], findings


@pytest.mark.parametrize(("rel", "text"), CLEAN, ids=[f"{p[0]}-{i}" for i, p in enumerate(CLEAN)])
def test_the_same_files_without_it_or_naming_it_in_comments_are_clean(tmp_path, rel, text):
    _write(tmp_path, rel, text)
    assert foreign_findings(tmp_path, ["torch"], markers=MARKERS) == []


@pytest.mark.parametrize(
    ("rel", "text", "line"),
    [
        ("run.sh", "#!/bin/sh\n# do not: python /source/train.py\npython /source/train.py\n", 3),
        ("run.sh", "PYTHONPATH=/source python -m app\n", 1),
        ("run.sh", "cd /source\n", 1),
        ("requirements.txt", "jax\n-e /source\n", 2),
    ],
)
def test_a_shell_script_or_requirement_calling_into_the_original_loads_it(tmp_path, rel, text, line):
    _write(tmp_path, rel, text)
    findings = foreign_findings(tmp_path, ["torch"], markers=MARKERS)
    assert [(f.kind, f.line) for f in findings] == [("loads_original", line)], findings


def test_the_forbidden_names_come_from_the_task(tmp_path):
    _write(tmp_path, "requirements.txt", "torch\nflask>=3\n")
    _write(tmp_path, "run.sh", "python -c 'import flask'\n")
    found = {(f.file, f.line) for f in foreign_findings(tmp_path, ["flask"])}
    assert found == {("requirements.txt", 2), ("run.sh", 1)}


@pytest.mark.parametrize(
    ("name", "head", "kind"),
    [
        ("start", "#!/bin/bash\n", "shell"),
        ("start", "#!/usr/bin/env sh\n", "shell"),
        ("start", "#!/usr/bin/env python3\n", None),
        ("notes", "pip install torch\n", None),
        ("x.cuh", "", "cpp"),
        ("requirements-gpu.in", "", "requirements"),
        ("README.md", "pip install torch\n", None),
    ],
)
def test_file_kind(tmp_path, name, head, kind):
    assert file_kind(_write(tmp_path, name, head)) == kind


def test_walk_skips_symlinks_caches_and_oversized_files(tmp_path):
    outside = tmp_path / "outside"
    _write(outside, "requirements.txt", "torch\n")
    cand = tmp_path / "cand"
    _write(cand, "ok.sh", "echo\n")
    _write(cand, "__pycache__/requirements.txt", "torch\n")
    _write(cand, "big.sh", "pip install torch\n" + "#" * MAX_FILE_BYTES)
    (cand / "linked").symlink_to(outside, target_is_directory=True)
    (cand / "requirements.txt").symlink_to(outside / "requirements.txt")
    assert [rel for _, rel in walk(cand)] == ["ok.sh"]
    assert foreign_findings(cand, ["torch"]) == []


def test_a_symlink_into_the_original_loads_it(tmp_path):
    (tmp_path / "train.sh").symlink_to("/source/train.sh")
    (tmp_path / "data").symlink_to("/source")
    (tmp_path / "own.sh").symlink_to("train.sh")
    findings = [(f.kind, f.file) for f in foreign_findings(tmp_path, ["torch"], markers=MARKERS)]
    assert findings == [("loads_original", "data"), ("loads_original", "train.sh")]


def test_walk_is_capped_in_depth(tmp_path, monkeypatch):
    import probes.foreign_files as ff

    monkeypatch.setattr(ff, "MAX_DEPTH", 2)
    _write(tmp_path, "a/b/requirements.txt", "torch\n")
    _write(tmp_path, "a/b/c/requirements.txt", "torch\n")
    assert [rel for _, rel in walk(tmp_path)] == ["a/b/requirements.txt"]


@pytest.mark.parametrize(
    ("rel", "text"),
    [
        ("pyproject.toml", "[project\n"),
        ("pyproject.toml", 'project = "x"\n'),
        ("pyproject.toml", "[project]\ndependencies = 3\n"),
        ("setup.cfg", "[options\n"),
        ("environment.yml", "a: [\n"),
    ],
)
def test_a_malformed_declaration_is_unparsable_not_a_crash(tmp_path, rel, text):
    _write(tmp_path, rel, text)
    assert [f.kind for f in foreign_findings(tmp_path, ["torch"])] == ["unparsable"]


def test_a_torch_extension_built_by_setup_py_is_a_forbidden_import(tmp_path):
    _write(
        tmp_path,
        "setup.py",
        "from setuptools import setup\nfrom torch.utils.cpp_extension import BuildExtension, CppExtension\n"
        "setup(ext_modules=[CppExtension('ops', ['ops.cpp'])], cmdclass={'build_ext': BuildExtension})\n",
    )
    findings = [(f.kind, f.file, f.line) for f in audit_candidate(tmp_path, SOURCE, forbidden=["torch"])]
    assert findings == [("forbidden_import", "setup.py", 2)]


def test_the_audit_reports_them_and_no_longer_greps_comments(tmp_path):
    _write(tmp_path, "model.py", "import numpy\n")
    _write(tmp_path, "run.sh", "# pip install torch\npip install torch\n")
    _write(tmp_path, "csrc/ext.cpp", "#include <torch/extension.h>\n")
    _write(tmp_path, "pyproject.toml", '[project]\nname = "x"  # was: pip install torch\ndependencies = ["jax"]\n')
    _write(tmp_path, "Dockerfile", "RUN pip install torch\n")
    findings = [(f.kind, f.file, f.line) for f in audit_candidate(tmp_path, SOURCE, forbidden=["torch"])]
    assert findings == [
        ("forbidden_import", "Dockerfile", 1),
        ("forbidden_import", "csrc/ext.cpp", 1),
        ("forbidden_import", "run.sh", 2),
    ]


ORACLES = sorted(REPO.glob("tasks/t2j-mini/*/solution/app")) + [REPO / "tasks" / "flask-to-starlette" / "solution"]


@pytest.mark.parametrize(
    "oracle", ORACLES, ids=lambda p: p.relative_to(REPO / "tasks").parts[0 if "flask" in str(p) else 1]
)
@pytest.mark.parametrize("forbidden", [["torch"], ["flask"]])
def test_bundled_oracles_get_no_new_finding(oracle, forbidden):
    assert oracle.is_dir()
    assert foreign_findings(oracle, forbidden, markers=MARKERS) == []


def _ctx(candidate, tmp_path):
    return make_context(load_task(TINY), candidate, sandbox_kind="none", workdir=tmp_path / "work")


def test_independence_and_wrapping_carry_the_findings(tmp_path, candidate_copy):
    cand = candidate_copy("good")
    _write(cand, "requirements.txt", "numpy\ntorch\n")
    _write(cand, "run.sh", "python /source/train.py\n")
    imports, independence = imports_check()(_ctx(cand, tmp_path))
    assert imports.outcome is Outcome.ESTABLISHED
    assert independence.outcome is Outcome.VIOLATED
    assert "requirements.txt:2" in independence.observations["message"]
    wrapping = {r.property.id: r for r in audit_check(transliteration=False)(_ctx(cand, tmp_path))}["audit.wrapping"]
    assert wrapping.outcome is Outcome.VIOLATED
    assert [(f["file"], f["line"]) for f in wrapping.observations["findings"]] == [("run.sh", 1)]


@pytest.mark.parametrize("pull", [True, False])
def test_twin_probe_shows_the_violation(tmp_path, pull):
    cand = tmp_path / "cand"
    (cand).mkdir()
    (cand / "model.py").write_text((CANDIDATES / "good" / "model.py").read_text())
    _write(cand, "csrc/ext.cpp", "// port of torch code\n" + ("#include <torch/extension.h>\n" if pull else ""))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli.app",
            "probe",
            "--task",
            str(TINY),
            "--candidate",
            str(cand),
            "--no-library",
            "--sandbox",
            "none",
            "--json",
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == (1 if pull else 0), proc.stderr  # 1: a property violated
    results = {r["property"]["id"]: r for r in json.loads(proc.stdout)["results"]}
    independence = results["independence"]
    if pull:
        assert independence["outcome"] == "violated"
        assert (
            "csrc/ext.cpp:2 includes the source framework's torch/extension.h"
            in independence["observations"]["message"]
        )
    else:
        assert independence["outcome"] == "established"


def test_the_verifiers_run_checks_reports_them(tmp_path):
    from evidence_store.store import EvidenceStore
    from harness.scaffolds.twin.probe_desk import RunProbeDesk
    from task_model.loader import load_task

    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "model.py").write_text("import numpy\n")
    _write(cand, "scripts/setup.sh", "# torch is gone\npip install jax 'torch==2.1'\n")
    store = EvidenceStore(tmp_path / "e.sqlite")
    desk = RunProbeDesk(
        load_task(TINY), cand, tmp_path / "probes", store, run_id="r", sandbox_kind="none", audit_log=None
    )
    text = desk.run_checks()
    assert "scripts/setup.sh:2 installs the source framework" in text
    (independence,) = [r for r in store.records() if r.property.id == "independence"]
    assert independence.outcome is Outcome.VIOLATED
