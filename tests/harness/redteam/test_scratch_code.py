"""A role's candidate side, code-confined beside its /scratch: further ways to run native code the reference side wrote.

Each attempt is made on the candidate side (where each must fail) and, as its control, on the
reference side (where the same attempt loads or runs, so a refusal is the confinement's doing
and not a broken attempt). Held by the kernel as twin mounts it: running the dynamic loader
directly on a program in /scratch, LD_PRELOAD, mapping a file readable and then `mprotect` to
executable, reopening through `/proc/self/fd` and `/proc/self/root`, an `O_TMPFILE` in /tmp,
a hard link out of /scratch, POSIX shared memory under its own name, the `READ_IMPLIES_EXEC`
personality, a `#!` script executed from /scratch, and `memfd_secret` (whose mappings the
kernel never makes executable). Reading a `.py` of /scratch with the interpreter still works:
it is data, as docs/security.md says.
"""

from __future__ import annotations

import shutil

import pytest

from harness.models.config import ModelConfig
from harness.run.directory import RunConfig
from harness.run.session import RunInputs, open_session
from roles.tools import workbench_tools
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs the real bwrap sandbox"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="builds a program and a library with the system compiler"),
]

_BUILD = r"""
cd /tmp && printf '#include <stdio.h>\nint main(void){puts("PROGRAM-RAN");return 0;}\n' > p.c \
 && cc -o /scratch/program p.c && printf 'int carried = 1;\n' > l.c && cc -shared -fPIC -o /scratch/libc.so l.c \
 && printf '#!/bin/sh\necho SCRIPT-RAN\n' > /scratch/script.sh && chmod +x /scratch/script.sh \
 && echo 'print("DATA-READ")' > /scratch/data.py && cat > /scratch/attempts.py <<'PY'
ATTEMPTS
PY
"""

_ATTEMPTS = r"""
import ctypes, mmap, os, shutil, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
SO = "/scratch/libc.so"
def attempt(label, fn):
    try:
        fn()
        print("LOADED", label)
    except Exception as exc:
        print("refused", label, type(exc).__name__)
def ran(argv, mark, env=None):
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    if mark not in out.stdout + out.stderr or "cannot be preloaded" in out.stderr:
        raise OSError(out.stderr.strip()[:60])
def mprotect():
    with open(SO, "rb") as f:
        m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE)
        start = next(int(l.split("-")[0], 16) for l in open("/proc/self/maps") if SO in l)
        if libc.mprotect(ctypes.c_void_p(start), 4096, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
def copy_into(path):
    with open(SO, "rb") as src:
        data = src.read()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o700)
    os.write(fd, data)
    ctypes.CDLL(f"/proc/self/fd/{fd}")
def tmpfile():
    fd = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o700)
    os.write(fd, open(SO, "rb").read())
    ctypes.CDLL(f"/proc/self/fd/{fd}")
def hard_link():
    os.link(SO, "/tmp/linked.so")
    ctypes.CDLL("/tmp/linked.so")
def read_implies_exec():
    libc.personality(0x0400000)
    ctypes.CDLL(SO)
def secret():
    fd = libc.syscall(447, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "memfd_secret")
    os.ftruncate(fd, 4096)
    if libc.mmap(None, 4096, 7, 1, fd, 0) in (None, 2**64 - 1):
        raise OSError(ctypes.get_errno(), "an executable mapping of a secret memory file")
attempt("ld.so-run", lambda: ran(["/lib64/ld-linux-x86-64.so.2", "/scratch/program"], "PROGRAM-RAN"))
attempt("ld_preload", lambda: ran(["/bin/echo", "PRELOADED"], "PRELOADED", {"LD_PRELOAD": SO}))
attempt("mprotect", mprotect)
attempt("proc-fd", lambda: ctypes.CDLL(f"/proc/self/fd/{os.open(SO, os.O_RDONLY)}"))
attempt("proc-root", lambda: ctypes.CDLL("/proc/self/root" + SO))
attempt("o-tmpfile", tmpfile)
attempt("shm-by-name", lambda: copy_into("/proc/self/root/dev/shm/carried"))
attempt("read-implies-exec", read_implies_exec)
attempt("script", lambda: ran(["/scratch/script.sh"], "SCRIPT-RAN"))
attempt("hard-link", hard_link)
attempt("memfd-secret", secret)
print(subprocess.run([sys.executable, "/scratch/data.py"], capture_output=True, text=True).stdout.strip())
"""

LOAD_ON_THE_REFERENCE_SIDE = [
    "ld.so-run", "ld_preload", "mprotect", "proc-fd", "proc-root", "o-tmpfile", "shm-by-name", "read-implies-exec",
    "script",
]  # fmt: skip
REFUSED_BY_THE_KERNEL_ANYWAY = ["hard-link", "memfd-secret"]  # across mounts; never executable


@pytest.fixture
def session(tmp_path):
    script = tmp_path / "x.json"
    script.write_text("[]")
    config = RunConfig.build(task=plans.TINY_TASK, model=f"scripted:{script}", sandbox="bwrap", grade=False)
    config = config.model_copy(update={"model": ModelConfig(name=f"scripted:{script}")})
    session = open_session(RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r"))
    yield session
    session.close()


def _outcomes(text: str) -> dict[str, str]:
    return {line.split()[1]: line.split()[0] for line in text.splitlines() if line.startswith(("LOADED", "refused"))}


def test_native_code_from_scratch_runs_on_the_candidate_side_by_no_other_way(session):
    tools = workbench_tools(session.workbench("diagnoser", write=False), write=False)
    built = tools["bash_reference"](command=_BUILD.replace("ATTEMPTS", _ATTEMPTS))
    assert built.ok, built.text
    control = tools["bash_reference"](command="cd / && python3 /scratch/attempts.py")
    assert control.ok, control.text
    loaded = _outcomes(control.text)
    assert all(loaded[label] == "LOADED" for label in LOAD_ON_THE_REFERENCE_SIDE), control.text
    assert all(loaded[label] == "refused" for label in REFUSED_BY_THE_KERNEL_ANYWAY), control.text
    attacked = tools["bash"](command="cd / && python3 /scratch/attempts.py")
    assert attacked.ok, attacked.text
    outcomes = _outcomes(attacked.text)
    assert set(outcomes) == set(LOAD_ON_THE_REFERENCE_SIDE + REFUSED_BY_THE_KERNEL_ANYWAY), attacked.text
    assert "LOADED" not in outcomes.values(), attacked.text
    assert "DATA-READ" in attacked.text  # a .py there is data the interpreter reads, as on the reference side
