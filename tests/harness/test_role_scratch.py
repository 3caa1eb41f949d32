"""A read-only role's /scratch: written on the reference side, read on the candidate side, kept
across its commands; no scratch for a role that writes the candidate; removed when the run closes."""

from __future__ import annotations

import shutil

import pytest

from harness.models.config import ModelConfig
from harness.run.directory import RunConfig
from harness.run.session import RunInputs, open_session
from roles.tools import workbench_tools
from task_model.loader import load_task
from tests.harness import loop_scripts as plans

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="runs the real bwrap sandbox")


@pytest.fixture
def session(tmp_path):
    config = RunConfig.build(task=plans.TINY_TASK, model="scripted:x.json", sandbox="bwrap", grade=False)
    script = tmp_path / "x.json"
    script.write_text("[]")
    config = config.model_copy(update={"model": ModelConfig(name=f"scripted:{script}")})
    inputs = RunInputs.create(tmp_path / "runs", config, load_task(plans.TINY_TASK), "r")
    session = open_session(inputs)
    yield session
    session.close()


def test_a_read_only_roles_scratch_carries_arrays_from_the_reference_side_to_the_candidate_side(session):
    tools = workbench_tools(session.workbench("verifier", write=False), write=False)
    saved = tools["bash_reference"](command="python3 -c \"open('/scratch/ref.txt', 'w').write('42')\"")
    assert saved.ok, saved.text
    assert "42" in tools["bash_reference"](command="cat /scratch/ref.txt").text  # kept across commands
    assert "42" in tools["bash"](command="cat /scratch/ref.txt").text  # and readable on the candidate side
    refused = tools["bash"](command="echo 1 > /scratch/from_candidate.txt")
    assert not refused.ok  # read-only there: nothing flows back from the candidate side
    assert "/scratch" in tools["bash_reference"].description and "/scratch" in tools["bash"].description
    root = session.scratch_root
    assert (root / "verifier" / "ref.txt").read_text() == "42"
    assert not (session.run.candidate / "ref.txt").exists()
    session.close()
    assert not root.exists()


def test_a_role_that_writes_the_candidate_has_no_scratch(session):
    tools = workbench_tools(session.workbench("migrator", write=True), write=True)
    assert not tools["bash_reference"](command="echo 1 > /scratch/x").ok
    assert not tools["bash"](command="ls /scratch").ok
    assert "/scratch" not in tools["bash_reference"].description
    assert "nothing written on this side outlives it" in tools["bash_reference"].description


# A tiny extension module, compiled on the reference side with the system compiler: what an agent
# would carry to the candidate side in place of torch's own shared objects.
_EXTENSION_C = r"""
#include <Python.h>
static struct PyModuleDef carried = {PyModuleDef_HEAD_INIT, "carried", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_carried(void) { return PyModule_Create(&carried); }
"""
_BUILD = (
    "mkdir -p /scratch/ext && cat > /tmp/carried.c <<'C'\n"
    + _EXTENSION_C
    + "\nC\n"
    + 'cc -shared -fPIC $(python3 -c \'import sysconfig; print("-I" + sysconfig.get_paths()["include"])\') '
    "-o /scratch/ext/carried$(python3 -c 'import sysconfig; print(sysconfig.get_config_var(\"EXT_SUFFIX\"))') "
    "/tmp/carried.c && cp /scratch/ext/carried*.so /scratch/ext/libcarried.so"
)
# Every way a candidate-side command could try to load it: in place, or from a copy in every place
# it can write (/tmp, /dev/shm, /dev) or in a memory file.
_LOAD = r"""
import ctypes, glob, os, shutil, sys
so = glob.glob("/scratch/ext/carried*.so")[0]
def attempt(label, load):
    try:
        load()
        print("LOADED", label)
    except Exception as exc:
        print("refused", label, type(exc).__name__)
sys.path.insert(0, "/scratch/ext")
attempt("import from /scratch", lambda: __import__("carried"))
attempt("dlopen in /scratch", lambda: ctypes.CDLL("/scratch/ext/libcarried.so"))
for place in ("/tmp", "/dev/shm", "/dev"):
    def copied(place=place):
        target = os.path.join(place, "libcarried.so")
        shutil.copy(so, target)
        ctypes.CDLL(target)
    attempt("dlopen of a copy in " + place, copied)
def memory_file():
    fd = os.memfd_create("carried")
    os.write(fd, open(so, "rb").read())
    ctypes.CDLL(f"/proc/self/fd/{fd}")
attempt("dlopen of a memory file", memory_file)
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="builds a native module with the system compiler")
def test_native_code_carried_through_scratch_cannot_be_loaded_on_the_candidate_side(session):
    tools = workbench_tools(session.workbench("diagnoser", write=False), write=False)
    built = tools["bash_reference"](command=_BUILD)
    assert built.ok, built.text
    # the control: the carried module is a working one, where native code may load
    control = tools["bash_reference"](command="cd / && python3 -c " + _shell_quote(_LOAD))
    assert control.text.count("LOADED") == 6, control.text
    attacked = tools["bash"](command="cd / && python3 -c " + _shell_quote(_LOAD))
    assert attacked.ok, attacked.text
    assert "LOADED" not in attacked.text, attacked.text
    assert attacked.text.count("refused") == 6, attacked.text
    # torch's own shared objects are no different: one carried there loads on the reference side only
    carry = "import torch, shutil; shutil.copy(torch.__path__[0] + '/lib/libc10.so', '/scratch/libc10.so')"
    assert tools["bash_reference"](command=f'python3 -c "{carry}"').ok
    load = "import ctypes; ctypes.CDLL('/scratch/libc10.so'); print('LOADED')"
    assert "LOADED" in tools["bash_reference"](command=f'python3 -c "{load}"').text
    carried = tools["bash"](command=f'python3 -c "{load}"')
    assert not carried.ok and "LOADED" not in carried.text, carried.text
    assert "failed to map segment" in carried.text


def test_data_still_crosses_scratch_from_the_reference_side(session):
    tools = workbench_tools(session.workbench("verifier", write=False), write=False)
    save = "import numpy; numpy.savez('/scratch/ref.npz', logits=numpy.arange(6.0).reshape(2, 3))"
    assert tools["bash_reference"](command=f'python3 -c "{save}"').ok
    read = "import numpy; print(numpy.load('/scratch/ref.npz')['logits'].sum())"
    shown = tools["bash"](command=f'python3 -c "{read}"')
    assert shown.ok and "15.0" in shown.text, shown.text
    assert "data" in tools["bash"].description and "cannot be loaded" in tools["bash"].description


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_under_docker_a_read_only_role_gets_no_scratch(session, monkeypatch):
    """The engine cannot mount a bind noexec: no /scratch at all rather than one that loads code."""
    import harness.run.session as session_module

    class Stub:
        def close(self) -> None:
            pass

    built = []
    monkeypatch.setattr(session_module, "make_sandbox", lambda kind, boundary: built.append(boundary) or Stub())
    session.config = session.config.model_copy(update={"sandbox": "docker"})
    bench = session.workbench("verifier", write=False)
    assert bench.scratch is None and session.scratch_root is None
    assert len(built) == 2 and not any(boundary.code_confined for boundary in built)
    assert all(mount.inside != "/scratch" for boundary in built for mount in boundary.mounts)
    assert "/scratch" not in workbench_tools(bench, write=False)["bash"].description
