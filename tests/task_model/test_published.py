"""Published tasks (no [metadata.twin]): the Dockerfile's layout, the conventions, the one-line refusals."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness.cli.app import main
from task_model.dockerfile import DockerfileError, read_dockerfile
from task_model.loader import load_task
from task_model.model import TaskError

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tasks" / "published" / "tiny-net"

DOCKERFILE = """FROM python:3.11-slim
ARG ROOT=/app
RUN pip install --no-cache-dir numpy "jax[cpu]>=0.4" && mkdir -p $ROOT/jax_repo
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY torch_orig ${ROOT}/torch_orig
COPY checkpoint $ROOT/checkpoint
COPY notes.txt run.sh /app/extra/
WORKDIR $ROOT
ENV JAX_PLATFORMS=cpu MODE="a b"
ENV HF_TOKEN=dummy PATH=/opt/venv/bin:$PATH
LABEL x=y
CMD ["bash"]
"""
INSTRUCTION = (
    "Port the PyTorch code in `/app/torch_orig` to JAX. Write it in `/app/jax_repo/`; "
    "the weights are in /app/checkpoint/model.safetensors.\n"
)


def make_task(root: Path, dockerfile: str = DOCKERFILE, instruction: str | None = INSTRUCTION) -> Path:
    """A published-layout task without [metadata.twin] (T2J-Bench's shape)."""
    env = root / "environment"
    (env / "torch_orig" / "net").mkdir(parents=True)
    (env / "torch_orig" / "net" / "model.py").write_text("import torch\n\nclass Net(torch.nn.Module):\n    pass\n")
    (env / "checkpoint").mkdir()
    (env / "checkpoint" / "model.safetensors").write_bytes(b"\0" * 16)
    (env / "notes.txt").write_text("notes\n")
    (env / "run.sh").write_text("echo hi\n")
    if dockerfile is not None:
        (env / "Dockerfile").write_text(dockerfile)
    (root / "task.toml").write_text('version = "1.0"\n\n[verifier]\ntimeout_sec = 120.0\n')
    if instruction is not None:
        (root / "instruction.md").write_text(instruction)
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


@pytest.mark.parametrize(
    "text, output",
    [
        (
            "Write the port in `/app/jax_repo/`, e.g. /app/jax_repo/net/model.py and /app/jax_repo/net.\n",
            "/app/jax_repo",
        ),
        ("Keep /app/torch_orig; write /app/port and /app/jax_port.\n", "/app/jax_port"),
        ("Read /usr/lib/x and /tmp/scratch, write /optimizer_port (log to /logs/verifier).\n", "/optimizer_port"),
    ],
)
def test_output_is_the_directory_the_instruction_names(tmp_path, text, output):
    assert load_task(make_task(tmp_path / "t", instruction=text)).settings.candidate_mount == output


def test_dockerfile_layout_conventions_and_notes(tmp_path):
    task = load_task(make_task(tmp_path / "t"))
    s = task.settings
    assert (s.source_dir, s.source_mount) == ("environment/torch_orig", "/app/torch_orig")
    assert (s.assets_dir, s.assets_mount) == ("environment/checkpoint", "/app/checkpoint")
    assert s.candidate_mount == "/app/jax_repo"
    assert s.forbidden_packages == ["torch"]
    layout = task.environment
    assert layout.workdir == "/app"
    assert layout.env == {"JAX_PLATFORMS": "cpu", "MODE": "a b"}  # the token-like name is not passed on
    assert {c.inside for c in task.extra_layout} == {"/app/extra/notes.txt", "/app/extra/run.sh"}
    notes = "\n".join(layout.notes)
    assert "numpy, jax already in twin's environment" in notes and "torch already" in notes
    assert "HF_TOKEN not passed on" in notes and "LABEL skipped" in notes
    assert "ENV PATH not passed on (twin's sandbox sets it)" in notes


def test_settings_file_chooses_what_conventions_cannot(tmp_path):
    root = make_task(tmp_path / "t", instruction="Port it to /app/port_a or /app/other_out.\n")
    with pytest.raises(TaskError, match="several output directories"):
        load_task(root)
    side = tmp_path / "twin.toml"
    side.write_text('task = "t"\noutput = "/app/other_out"\nassets = ""\n')
    for task in (load_task(side), load_task(root, settings=side)):
        assert task.settings.candidate_mount == "/app/other_out"
        assert task.assets_dir is None
    side.write_text('task = "t"\noriginal = "/app/nowhere"\n')
    with pytest.raises(TaskError, match="original /app/nowhere is not a directory the Dockerfile lays out"):
        load_task(side)
    side.write_text('task = "t"\nunknown_key = 1\n')
    with pytest.raises(TaskError, match="bad key unknown_key"):
        load_task(side)


@pytest.mark.parametrize(
    "dockerfile, message",
    [
        ("FROM a\nFROM b\nCOPY torch_orig /app/torch_orig\n", "multi-stage"),
        ("FROM a\nCOPY --from=build /x /app/x\n", "--from"),
        ("FROM a\nADD https://example.com/x.tar.gz /app/\n", "a URL or an archive"),
        ("FROM a\nCOPY ../secret /app/s\n", "outside the build context|not found"),
        ("FROM a\nCOPY missing /app/m\n", "not found in the build context"),
        ("FROM a\nRUN apt-get install -y no-such-package-xyz\n", "no-such-package-xyz is not installed"),
        ("FROM a\nRUN pip install no-such-dist-xyz\n", "no-such-dist-xyz is not installed in twin"),
        ("FROM a\nRUN make all\n", "cannot run without docker"),
        ("FROM a\nVOLUME /data\n", "VOLUME is not supported"),
        ("COPY torch_orig /app/torch_orig\n", "no FROM"),
    ],
)
def test_unsupported_dockerfiles_are_refused_in_one_line(tmp_path, dockerfile, message):
    make_task(tmp_path / "t", dockerfile=dockerfile)
    with pytest.raises(DockerfileError, match=message) as info:
        read_dockerfile(tmp_path / "t" / "environment" / "Dockerfile")
    assert "\n" not in str(info.value)


def test_ignore_run_accepts_with_a_note(tmp_path):
    make_task(tmp_path / "t", dockerfile="FROM a\nRUN make all\nCOPY torch_orig /app/torch_orig\n")
    layout = read_dockerfile(tmp_path / "t" / "environment" / "Dockerfile", ignore_run=True)
    assert any("not honoured (ignore_run)" in n for n in layout.notes)


def test_whole_context_copy_and_requirements_file(tmp_path):
    root = make_task(tmp_path / "t", dockerfile="FROM a\nCOPY . /app\nRUN pip install -r /app/req.txt\n")
    (root / "environment" / "req.txt").write_text("numpy>=1.0  # arrays\nsafetensors\n")
    task = load_task(root)
    assert task.settings.source_mount == "/app/torch_orig"
    assert "Dockerfile" not in {Path(c.inside).name for c in task.environment.copies}
    assert any("numpy, safetensors" in n for n in task.environment.notes)


@pytest.mark.parametrize(
    "case, message",
    [
        ("no-dockerfile", "no environment/Dockerfile"),
        ("no-instruction", "has no instruction.md"),
        ("no-output", "names no output directory"),
        ("no-original", "imports torch; set original"),
        ("bad-run", "cannot run without docker"),
    ],
)
def test_malformed_published_tasks_exit_2_with_one_line(tmp_path, capsys, case, message):
    root = tmp_path / "t"
    if case == "no-dockerfile":
        make_task(root, dockerfile=None)
    elif case == "no-instruction":
        make_task(root, instruction=None)
    elif case == "no-output":
        make_task(root, instruction="Port /app/torch_orig to JAX.\n")
    elif case == "no-original":
        make_task(root)
        (root / "environment" / "torch_orig" / "net" / "model.py").write_text("import numpy\n")
    else:
        make_task(root, dockerfile="FROM a\nRUN make\nCOPY torch_orig /app/torch_orig\n")
    cand = tmp_path / "cand"
    cand.mkdir()
    assert main(["grade", "--task", str(root), "--candidate", str(cand)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in " ".join(err.split()) and err.startswith("error:")


def test_twin_layout_tasks_are_unchanged():
    task = load_task(REPO / "tasks" / "t2j-mini" / "mlp-train")
    assert task.environment is None and task.settings.source_mount == "/source"
    with pytest.raises(TaskError, match="published tasks only"):
        load_task(REPO / "tasks" / "t2j-mini" / "mlp-train", settings=TINY / "task.toml")


def test_bundled_published_task_loads_by_convention():
    task = load_task(TINY)
    assert task.environment is not None
    assert (task.settings.source_mount, task.settings.assets_mount, task.settings.candidate_mount) == (
        "/app/torch_orig",
        "/app/checkpoint",
        "/app/jax_repo",
    )
    from benchmark_adapter.grading.grader import oracle_candidate

    assert oracle_candidate(task) == TINY / "solution" / "jax_repo"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the grader runs in bwrap")
def test_grade_takes_settings_and_lays_out_app(tmp_path):
    root = make_task(tmp_path / "t", instruction="Port it to /app/port_a or /app/other_out.\n")
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "test -f /app/torch_orig/net/model.py && test -f /app/checkpoint/model.safetensors "
        "&& test -f /app/extra/notes.txt && test -f /app/other_out/port.py && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "port.py").write_text("x = 1\n")
    side = tmp_path / "twin.toml"
    side.write_text('output = "/app/other_out"\n')
    out = tmp_path / "g.json"
    assert main(["grade", "--task", str(root), "--candidate", str(cand), "--out", str(out)]) == 2
    grade = ["grade", "--task", str(root), "--candidate", str(cand), "--out", str(out)]
    assert main([*grade, "--settings", str(side)]) == 0
    assert json.loads(out.read_text())["reward"] == 1.0
    assert main([*grade, "--output-dir", "/app/other_out"]) == 0
    assert json.loads(out.read_text())["reward"] == 1.0
    assert main([*grade, "--output-dir", "/app/port_a"]) == 0
    assert json.loads(out.read_text())["reward"] == 0.0  # the candidate is at /app/port_a; test.sh looks elsewhere
    assert main([*grade, "--settings", str(side), "--assets-dir", "/app/nowhere"]) == 2


def test_a_settings_file_stands_for_its_task_in_benches(tmp_path):
    from harness.bench.schema import TrialSpec

    make_task(tmp_path / "t")
    side = tmp_path / "my-port.toml"
    side.write_text('task = "t"\n')
    assert load_task(side).root == (tmp_path / "t").resolve()
    assert TrialSpec(task=side, model="m", scaffold="twin", seed=0).task_name == "my-port"
    assert TrialSpec(task=tmp_path / "t", model="m", scaffold="twin", seed=0).task_name == "t"


def test_a_published_task_s_twin_metadata_adds_probe_files_and_interface_not_layout(tmp_path):
    root = make_task(tmp_path / "t")
    (root / "tests" / "probes").mkdir()
    (root / "tests" / "probes" / "p.py").write_text("def reference(env):\n    return {}\n")
    toml = (root / "task.toml").read_text()
    (root / "task.toml").write_text(
        toml + '\n[metadata.twin]\nprobe_files = ["tests/probes/p.py"]\n\n'
        '[[metadata.twin.interface.jit]]\nfunction = "net.model:forward"\nargs = [{normal = [2, 4]}]\n'
    )
    task = load_task(root)
    assert task.environment is not None and task.settings.source_mount == "/app/torch_orig"
    assert task.settings.probe_files == ["tests/probes/p.py"]
    assert [c.function for c in task.settings.interface.jit] == ["net.model:forward"]


@pytest.mark.parametrize(
    ("twin", "message"),
    [
        ('probe_files = ["../outside.py"]', "must be a file inside the task directory"),
        ('probe_files = ["/etc/passwd"]', "must be a file inside the task directory"),
        ('[metadata.twin.interface.loss]\nfunction = "no-colon"', "bad [metadata.twin] interface.loss.function"),
    ],
)
def test_bad_published_twin_metadata_is_one_line(tmp_path, twin, message):
    root = make_task(tmp_path / "t")
    body = twin if twin.startswith("[") else f"[metadata.twin]\n{twin}"
    (root / "task.toml").write_text((root / "task.toml").read_text() + "\n" + body + "\n")
    with pytest.raises(TaskError, match=re.escape(message)):
        load_task(root)
