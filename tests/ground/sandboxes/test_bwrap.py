"""The bubblewrap sandbox: commands, environment, hidden packages, limits, files, the grader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_adapter.grading.grader import grader_boundary
from ground.boundary import Boundary, BoundaryViolation, Limits, Mount
from ground.isolation import python_mounts
from ground.sandbox import SandboxError
from ground.sandboxes.base import sandbox_env
from ground.sandboxes.bwrap import BwrapSandbox
from ground.sandboxes.packages import hidden_entries, site_dirs
from task_model.loader import load_task
from tests.conftest import requires_bwrap
from tests.harness.redteam.conftest import make_task

pytestmark = [requires_bwrap, pytest.mark.bwrap]


@pytest.fixture(scope="module")
def candidate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("candidate")


def make(candidate: Path, **kwargs) -> BwrapSandbox:
    fields = dict(
        name="verifier:candidate",
        mounts=[*python_mounts(), Mount(host=candidate, inside="/app", writable=True)],
        workdir="/app",
        limits=Limits(wall_s=30, memory_mb=2048, max_procs=64, output_bytes=4000),
    )
    fields.update(kwargs)
    return BwrapSandbox(Boundary(**fields))


@pytest.fixture(scope="module")
def sandbox(candidate: Path) -> BwrapSandbox:
    return make(candidate, hidden_packages=["torch"])


def test_string_runs_in_bash_and_argv_runs_directly(sandbox):
    assert sandbox.exec("echo $((6 * 7)) && pwd").stdout.split() == ["42", "/app"]
    assert sandbox.exec(["echo", "$HOME"]).stdout.strip() == "$HOME"


def test_exit_status_stdin_and_cwd(sandbox):
    result = sandbox.exec("cat; exit 3", stdin="fed", cwd="/tmp")
    assert result.returncode == 3 and result.stdout == "fed" and not result.ok
    assert sandbox.exec("pwd", cwd="/usr").stdout.strip() == "/usr"
    assert sandbox.exec("mkdir -p sub && cd sub && pwd").stdout.strip() == "/app/sub"
    assert sandbox.exec("pwd", cwd="sub").stdout.strip() == "/app/sub"


def test_environment_is_built_from_scratch(sandbox, monkeypatch):
    monkeypatch.setenv("TWIN_OUTSIDE_ONLY", "leak")
    env = dict(
        line.split("=", 1) for line in sandbox.exec("env", env={"EXTRA": "1"}).stdout.splitlines()
    )
    assert "TWIN_OUTSIDE_ONLY" not in env
    assert env["HOME"] == "/tmp" and env["PYTHONDONTWRITEBYTECODE"] == "1" and env["EXTRA"] == "1"
    assert env["PATH"].startswith(str(Path(sys.prefix) / "bin"))


def test_secret_looking_variables_are_refused(sandbox, monkeypatch):
    with pytest.raises(BoundaryViolation):
        sandbox.exec("true", env={"OPENAI_API_KEY": "sk-x"})
    with pytest.raises(ValueError):
        Boundary(name="x", env_allow=["ANTHROPIC_API_KEY"])
    monkeypatch.setenv("TWIN_ALLOWED", "yes")
    allowed = Boundary(name="x", env_allow=["TWIN_ALLOWED"])
    assert sandbox_env(allowed, None)["TWIN_ALLOWED"] == "yes"


def test_same_interpreter_inside_with_torch_absent(sandbox):
    result = sandbox.exec(["python", "-c", "import sys, numpy; print(sys.prefix)"])
    assert result.stdout.strip() == sys.prefix
    missing = sandbox.exec(["python", "-c", "import torch"])
    assert "ModuleNotFoundError: No module named 'torch'" in missing.stderr


FIND_TORCH = (
    "import importlib.util as u; s = u.find_spec('torch'); print(open(s.origin).read(0) == '')"
)


def test_reference_side_and_host_keep_torch(candidate):
    reference = make(candidate, name="verifier:reference")
    assert reference.exec(["python", "-c", FIND_TORCH]).stdout.strip() == "True"
    outside = subprocess.run([sys.executable, "-c", FIND_TORCH], capture_output=True, text=True)
    assert outside.stdout.strip() == "True"


@pytest.mark.slow  # importing torch takes 10-30 s on a loaded machine
def test_reference_side_imports_torch(candidate):
    reference = make(candidate, name="verifier:reference")
    result = reference.exec(["python", "-c", "import torch; print(torch.ones(2).sum().item())"])
    assert result.stdout.strip() == "2.0", result.stderr


def test_hidden_entries_cover_the_whole_distribution():
    site = site_dirs()[0]
    dropped = hidden_entries(site, ("torch",))
    assert {"torch", "functorch", "torchgen"} <= dropped
    assert any(name.startswith("torch-") and name.endswith(".dist-info") for name in dropped)
    assert "numpy" not in dropped


@pytest.mark.slow  # builds a second pruned site-packages (tens of thousands of hard links)
def test_any_hidden_package_is_absent(candidate):
    no_numpy = make(candidate, hidden_packages=["numpy"])
    result = no_numpy.exec(["python", "-c", "import numpy"])
    assert "No module named 'numpy'" in result.stderr


def test_output_keeps_head_and_tail(sandbox):
    result = sandbox.exec("seq 1 100000")
    assert result.truncated and result.stdout.startswith("1\n2\n")
    assert result.stdout.rstrip().endswith("100000")
    assert len(result.stdout) < 4000 + 100


def test_time_out_kills_the_whole_sandbox(sandbox):
    result = sandbox.exec("sleep 100 & sleep 100", timeout_s=0.5)
    assert result.timed_out and result.returncode == 124 and result.duration_s < 5


def test_files_round_trip_and_read_only_roots(sandbox, candidate):
    sandbox.write_file("/app/pkg/mod.py", "X = 1\n")
    assert (candidate / "pkg" / "mod.py").read_text() == "X = 1\n"
    assert sandbox.read_file("pkg/mod.py") == b"X = 1\n"
    assert sandbox.exec("cat /app/pkg/mod.py").stdout == "X = 1\n"
    with pytest.raises(BoundaryViolation):
        sandbox.write_file("/usr/evil", "x")
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/app/missing.py")


def test_read_only_candidate_for_readers(candidate):
    reader = make(
        candidate, mounts=[*python_mounts(), Mount(host=candidate, inside="/app", writable=False)]
    )
    result = reader.exec("touch /app/new")
    assert result.returncode != 0 and not (candidate / "new").exists()
    with pytest.raises(BoundaryViolation):
        reader.write_file("/app/new", "x")


def test_cwd_through_a_symlink_out_of_the_candidate_is_refused(sandbox, candidate, tmp_path):
    (candidate / "elsewhere").symlink_to(tmp_path)
    with pytest.raises(BoundaryViolation):
        sandbox.exec("true", cwd="/app/elsewhere")
    assert sandbox.exec("true", cwd="/nowhere").returncode != 0


def test_missing_mount_source_and_closed_sandbox(tmp_path, candidate):
    with pytest.raises(SandboxError):
        make(candidate, mounts=[Mount(host=tmp_path / "gone", inside="/gone")])
    sandbox = make(candidate)
    sandbox.close()
    with pytest.raises(SandboxError):
        sandbox.exec("true")


def test_network_allowed_keeps_host_interfaces(candidate):
    with_net = make(candidate, network=True)
    without = make(candidate)
    count = "tail -n +3 /proc/net/dev | wc -l"
    assert int(with_net.exec(count).stdout) >= int(without.exec(count).stdout)
    assert without.exec("tail -n +3 /proc/net/dev | cut -d: -f1").stdout.split() == ["lo"]


# ---- the grader's sandbox ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def grader(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("grader")
    task = load_task(make_task(base / "task"))
    candidate = base / "candidate"
    candidate.mkdir()
    (candidate / "model.py").write_text("Y = 2\n")
    logs = base / "logs"
    boundary = grader_boundary(task, candidate, logs, audit_log=base / "audit.log")
    return task, logs, BwrapSandbox(boundary)


def test_grader_sees_tests_and_candidate_writes_only_logs(grader):
    task, logs, sandbox = grader
    result = sandbox.exec(
        "cat /tests/refs/secret.txt /app/model.py && echo 0.5 > /logs/verifier/reward.txt && "
        "(touch /app/x || touch /tests/x || echo read-only)"
    )
    assert "TWIN-REDTEAM-SECRET" in result.stdout and "Y = 2" in result.stdout
    assert "read-only" in result.stdout
    assert (logs / "reward.txt").read_text() == "0.5\n"
    gone = sandbox.exec(f"ls /solution {task.root}/solution /source; python -c 'import torch'")
    assert "answer.txt" not in gone.stdout and "No module named 'torch'" in gone.stderr


def test_bwrap_runs_nested_inside_the_grader_sandbox(grader):
    _, _, sandbox = grader
    nested = (
        "bwrap --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
        "--symlink usr/lib64 /lib64 --dev /dev --unshare-net --unshare-ipc --unshare-uts "
        "--unshare-pid --proc /proc --die-with-parent --new-session --cap-drop ALL -- "
        "/bin/sh -c 'ls /tests 2>&1; echo nested-ok'"
    )
    result = sandbox.exec(nested)
    assert result.returncode == 0, result.stderr
    assert "nested-ok" in result.stdout and "No such file" in result.stdout


def test_bwrap_is_not_usable_from_a_role_sandbox(sandbox):
    result = sandbox.exec("bwrap --ro-bind /usr /usr --dev /dev --unshare-net -- /usr/bin/true")
    assert result.returncode != 0


def test_bwrap_binary_missing(monkeypatch, candidate):
    monkeypatch.setattr("ground.sandboxes.bwrap.bwrap_path", lambda: None)
    with pytest.raises(SandboxError, match="bubblewrap"):
        make(candidate)


def test_candidate_side_runs_jax_and_multiprocessing(sandbox):
    jit = "import jax, jax.numpy as jnp; print(jax.jit(lambda x: (2 * x).sum())(jnp.ones(3)))"
    result = sandbox.exec(["python", "-c", jit], timeout_s=120)
    assert result.stdout.strip() == "6.0", result.stderr[-2000:]
    pool = (
        "import multiprocessing as mp\nif __name__ == '__main__':\n"
        "    with mp.Pool(2) as p: print(p.map(abs, [-1, -2]))"
    )
    assert sandbox.exec(["python", "-c", pool]).stdout.strip() == "[1, 2]"


# ---- a code-confined boundary: native code loads only from the roots given as executable --------
_LOAD_COPIES = r"""
import ctypes, os, shutil, sys
so = sys.argv[1]
def attempt(label, load):
    try:
        load()
        print("LOADED", label)
    except OSError as exc:
        print("refused", label, exc.errno or "")
def copy_in(place):
    target = os.path.join(place, "libcarried.so")
    shutil.copy(so, target)
    ctypes.CDLL(target)
def memory_file():
    fd = os.memfd_create("carried")
    os.write(fd, open(so, "rb").read())
    ctypes.CDLL(f"/proc/self/fd/{fd}")
attempt("in place", lambda: ctypes.CDLL(so))
for place in ("/tmp", "/dev/shm", "/dev"):
    attempt("copy in " + place, lambda place=place: copy_in(place))
attempt("memory file", memory_file)
"""


@pytest.fixture(scope="module")
def carried(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding one of torch's own shared objects, as a reference side could leave it."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("torch")
    library = Path(spec.origin).parent / "lib" / "libc10.so" if spec and spec.origin else None
    if library is None or not library.is_file():
        pytest.skip("needs torch's libc10.so on the host")
    folder = tmp_path_factory.mktemp("carried")
    shutil.copy(library, folder / "libc10.so")
    folder.chmod(0o755)  # the sandbox uid reads it, as it reads a role's scratch
    return folder


def test_a_code_confined_sandbox_loads_no_native_code_it_was_handed_or_wrote(carried):
    confined = make(
        carried,
        mounts=[
            *python_mounts(),
            Mount(host=carried, inside="/scratch", executable=False),
        ],
        workdir="/",
        hidden_packages=["torch"],
    )
    try:
        assert confined.boundary.code_confined
        result = confined.exec(["python", "-c", _LOAD_COPIES, "/scratch/libc10.so"])
        assert result.ok, result.stderr[-2000:]
        assert "LOADED" not in result.stdout and result.stdout.count("refused") == 5, result.stdout
        # /dev takes no file at all; the memory file is refused before anything is written to it
        assert "refused copy in /dev 30" in result.stdout and "refused memory file 1" in result.stdout
        # the interpreter's own native code still loads, JAX compiles and runs
        jit = "import jax, jax.numpy as jnp; print(jax.jit(lambda x: (2 * x).sum())(jnp.ones(3)))"
        ran = confined.exec(["python", "-c", jit], timeout_s=120)
        assert ran.stdout.strip() == "6.0", ran.stderr[-2000:]
        pool = (  # its semaphores live in /dev/shm: mapped as data, never as code
            "import multiprocessing as mp\nif __name__ == '__main__':\n"
            "    with mp.Pool(2) as p: print(p.map(abs, [-1, -2]))"
        )
        assert confined.exec(["python", "-c", pool]).stdout.strip() == "[1, 2]"
    finally:
        confined.close()


def test_the_same_copies_load_where_the_boundary_is_not_confined(carried):
    """The control: the same library and attempts load in a sandbox whose roots are all executable."""
    free = make(
        carried,
        mounts=[*python_mounts(), Mount(host=carried, inside="/scratch")],
        workdir="/",
    )
    try:
        assert not free.boundary.code_confined
        result = free.exec(["python", "-c", _LOAD_COPIES, "/scratch/libc10.so"])
        for label in ("in place", "copy in /tmp", "copy in /dev/shm", "memory file"):
            assert f"LOADED {label}" in result.stdout, result.stdout + result.stderr[-2000:]
    finally:
        free.close()


def test_the_seccomp_profile_follows_the_boundary(carried, candidate):
    from ground.sandboxes.bwrap import seccomp_profile

    confined = Boundary(name="c", mounts=[Mount(host=carried, inside="/scratch", executable=False)])
    assert seccomp_profile(confined) == "confined"
    assert seccomp_profile(Boundary(name="r", mounts=[Mount(host=candidate, inside="/app")])) == "strict"
    assert seccomp_profile(Boundary(name="g", nested_sandbox=True)) == "nested"
