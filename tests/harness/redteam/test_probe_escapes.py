"""Attacks on matched probes, through `probe_file_probe` and the real bubblewrap sandboxes.

A candidate with no implementation tries to score by reading the reference side's
outputs, to change the inputs it is handed, and to hide its violations behind a
hostile output file, an ended process or a forged error record. Each test fails if
the attack worked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evidence_store.records import Outcome
from probes.context import make_context
from probes.differential import probe_file_probe
from task_model.loader import load_task
from tests.conftest import requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.bwrap]

TINY = Path(__file__).resolve().parents[2] / "probes" / "fixtures" / "tiny"

PROBE_FILE = """
PROBES = {
    "steal": {"id": "rt.steal", "level": 1, "compare": {"y": "tensor"}},
    "tamper": {"id": "rt.tamper", "level": 1},
    "honest": {"id": "rt.honest", "level": 1, "compare": {"y": "tensor"}},
}

def inputs_steal(env):
    return {"x": env.rng.standard_normal(16).astype("float32")}

def inputs_tamper(env):
    return inputs_steal(env)

def inputs_honest(env):
    return inputs_steal(env)

def reference_steal(env):
    import numpy as np
    return {"y": np.sin(env.inputs["x"].astype(env.dtype)) * 3.7 + 1.0}

def reference_honest(env):
    return reference_steal(env)

def reference_tamper(env):
    return {"tampered": False}

def candidate_steal(env):
    from model import steal
    return {"y": steal(env.inputs["x"])}

def candidate_tamper(env):
    from model import tamper
    return {"tampered": tamper()}

def candidate_honest(env):
    from model import honest
    return {"y": honest(env.inputs["x"])}
"""

MODEL = '''
import glob, os
import numpy as np

def steal(x):
    """No implementation: return whatever the reference side wrote, if it can be found."""
    for pattern in ("/probe*/**/ref*/arrays.npz", "/tmp/**/ref*/arrays.npz", "%s/**/ref*/arrays.npz"):
        for path in glob.glob(pattern, recursive=True):
            try:
                with np.load(path) as data:
                    return data[data.files[0]]
            except Exception:
                continue
    return np.zeros_like(x)

def tamper():
    wrote = False
    for path in glob.glob("/probe*/**/inputs/inputs.npz", recursive=True) + glob.glob(
            "%s/**/inputs/inputs.npz", recursive=True):
        try:
            with open(path, "ab") as fh:
                fh.write(b"x")
            wrote = True
        except OSError:
            pass
    return wrote

def honest(x):
    return np.sin(x) * 3.7 + 1.0
'''

HOSTILE = {
    "deep": 'open(p, "w").write("[" * 200000 + "]" * 200000)',
    "corrupt": 'open(p, "w").write("{not json")',
    "huge": "os.truncate(p, 40 * 1024 * 1024)",
    "link": 'os.remove(p); os.symlink("/probe-given/probe.py", p)',
    "fifo": "os.remove(p); os.mkfifo(p)",
}


def candidate(tmp_path: Path, hostile: str | None, workdir: Path) -> Path:
    app = tmp_path / "app"
    app.mkdir()
    source = MODEL.replace("%s", str(workdir))
    if hostile is not None:
        source += (
            "\nimport atexit\n"
            "def _spoil():\n"
            "    for p in glob.glob('/probe/**/cand/manifest.json', recursive=True) + glob.glob("
            f"'{workdir}/**/cand/manifest.json', recursive=True):\n"
            f"        {HOSTILE[hostile]}\n"
            "atexit.register(_spoil)\n"
        )
    (app / "model.py").write_text(source)
    return app


def run(tmp_path: Path, hostile: str | None = None) -> dict:
    probe = tmp_path / "probe_rt.py"
    probe.write_text(PROBE_FILE)
    workdir = tmp_path / "work"
    app = candidate(tmp_path, hostile, workdir)
    ctx = make_context(load_task(TINY), app, sandbox_kind="bwrap", workdir=workdir, timeout_s=120)
    try:
        return {r.property.id: r for r in probe_file_probe(str(probe))(ctx)}
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return run(tmp_path_factory.mktemp("probe-attack"))


def test_candidate_side_cannot_read_the_reference_outputs(plain):
    result = plain["rt.steal"]
    assert result.outcome is Outcome.VIOLATED, (result.observations, result.trace)
    assert plain["rt.honest"].outcome is Outcome.ESTABLISHED, plain["rt.honest"].trace


def test_candidate_side_cannot_change_its_inputs(plain):
    result = plain["rt.tamper"]
    assert result.outcome is Outcome.ESTABLISHED, (result.observations, result.trace)


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_hostile_output_is_its_own_violation(tmp_path, hostile):
    results = run(tmp_path, hostile)
    for pid, result in results.items():
        assert result.outcome is not Outcome.NOT_ESTABLISHED, (pid, result.trace[-800:])
    honest = results["rt.honest"]
    assert honest.outcome is Outcome.VIOLATED and "unusable output" in honest.trace, honest.trace[-800:]


# Ways to end the candidate side without its outputs: its violations must stay violations.
ENDINGS = {
    "exit": "os._exit(0)",
    "kill": "os.kill(os.getpid(), 9)",
    # the driver's error record, written with a "probe" blame for every run, then the end
    "forged": (
        "import json, sys\n"
        "for r in json.load(open(sys.argv[1]))['runs']:\n"
        "    os.makedirs(r['out_dir'], exist_ok=True)\n"
        "    json.dump({'blame': 'probe', 'frames': [{'file': __file__, 'line': 1, 'name': 'steal'}],\n"
        "               'trace': 'AttributeError'}, open(os.path.join(r['out_dir'], 'error.json'), 'w'))\n"
        "os._exit(0)"
    ),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_ending_the_candidate_side_or_forging_its_record_is_a_violation(tmp_path, ending):
    probe = tmp_path / "probe_rt.py"
    probe.write_text(PROBE_FILE)
    app = candidate(tmp_path, None, tmp_path / "work")
    (app / "model.py").write_text("import os\n" + ENDINGS[ending] + "\n" + (app / "model.py").read_text())
    with make_context(load_task(TINY), app, sandbox_kind="bwrap", workdir=tmp_path / "work", timeout_s=120) as ctx:
        results = {r.property.id: r for r in probe_file_probe(str(probe))(ctx)}
    for pid, result in results.items():
        assert result.outcome is Outcome.VIOLATED, (pid, result.observations, result.trace[-800:])


def test_probe_work_directory_is_removed_unless_kept(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    made = make_context(load_task(TINY), app, sandbox_kind="none")
    made.workdir.joinpath("x").write_text("1")
    made.close()
    assert not made.workdir.exists()
    kept = make_context(load_task(TINY), app, sandbox_kind="none", keep=True)
    kept.close()
    assert kept.workdir.exists()
    named = make_context(load_task(TINY), app, sandbox_kind="none", workdir=tmp_path / "mine")
    named.close()
    assert (tmp_path / "mine").is_dir()
    os.rmdir(kept.workdir)


def test_probe_sandbox_uses_the_etc_snapshot(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    with make_context(load_task(TINY), app, sandbox_kind="bwrap") as ctx:
        result = ctx.sandbox("candidate").exec("ls /etc; test -e /etc/shadow && echo SHADOW")
    assert "SHADOW" not in result.stdout and "passwd" in result.stdout, result
