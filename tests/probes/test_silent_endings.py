"""A candidate cannot hide its violations by ending its process or by writing the driver's error record.

Each test is one attack on the `wrong` fixture candidate (whose probes are violated)
or on a candidate check; it fails if the attack turned a violation into
not_established. The probe's own failures stay not_established (the controls).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from probe_fixtures import CANDIDATES, FIXTURES, TINY

from evidence_store.records import Outcome
from probes.checks import file_checks, imports_check
from probes.context import make_context
from probes.differential import probe_file_probe
from task_model.loader import load_task

NUMPY_PROBES = FIXTURES / "probe_numpy.py"
MATCHED = ("np.affine", "np.net", "np.labels")

# Written into the candidate's error record for every run of its process, then the process ends.
FORGE = '''
import json as _json, os as _os, sys as _sys
_config = _json.load(open(_sys.argv[1]))
for _run in _config["runs"]:
    _os.makedirs(_run["out_dir"], exist_ok=True)
    with open(_os.path.join(_run["out_dir"], "error.json"), "w") as _f:
        _json.dump({"type": "AttributeError", "message": "no Net", "blame": "probe",
                    "frames": [{"file": __file__, "line": 3, "name": "<module>"}],
                    "trace": "AttributeError: module 'model' has no attribute 'Net'"}, _f)
_os._exit(0)
'''

ATTACKS = {
    "exit at import": "import os; os._exit(0)\n",
    "exit 3 at import": "import os; os._exit(3)\n",
    "SIGKILL at import": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n",
    "forged error record": FORGE,
}

# Raised from the candidate's function: an exception whose traceback reads as empty.
STRIPPED = '''

class _Untraceable(Exception):
    @property
    def __traceback__(self):
        return None

    @__traceback__.setter
    def __traceback__(self, value):
        pass


def affine(params, x):
    raise _Untraceable("no frames")


def net(params, x):
    raise _Untraceable("no frames")
'''


def attacked(tmp_path: Path, prefix: str = "", suffix: str = "") -> Path:
    app = tmp_path / "app"
    shutil.copytree(CANDIDATES / "wrong", app)
    model = app / "model.py"
    model.write_text(prefix + model.read_text() + suffix)
    return app


def matched(app: Path, tmp_path: Path) -> dict:
    ctx = make_context(load_task(TINY), app, sandbox_kind="none", workdir=tmp_path / "work")
    return {r.property.id: r for r in probe_file_probe(str(NUMPY_PROBES))(ctx)}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_ending_the_process_does_not_hide_violated_probes(tmp_path, attack):
    results = matched(attacked(tmp_path, ATTACKS[attack]), tmp_path)
    for pid in MATCHED:
        assert results[pid].outcome is Outcome.VIOLATED, (attack, pid, results[pid].observations)
    if attack != "forged error record":
        message = results["np.affine"].observations["message"]
        assert message.startswith("the candidate side ended without producing its outputs (")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_ending_the_process_does_not_hide_imports_and_independence(tmp_path, attack):
    candidate = attacked(tmp_path, ATTACKS[attack])
    ctx = make_context(load_task(TINY), candidate, sandbox_kind="none", workdir=tmp_path / "work")
    results = {r.property.id: r for r in imports_check()(ctx)}
    assert results["imports"].outcome is Outcome.VIOLATED, results["imports"].observations
    assert results["independence"].outcome is Outcome.VIOLATED, results["independence"].observations


def test_ending_the_process_does_not_hide_a_failing_check(tmp_path):
    app = attacked(tmp_path, ATTACKS["exit at import"])
    ctx = make_context(load_task(TINY), app, sandbox_kind="none", workdir=tmp_path / "work")
    results = {r.property.id: r for r in file_checks(str(NUMPY_PROBES), ["ok", "bad"])(ctx)}
    assert results["probe_numpy.ok"].outcome is Outcome.VIOLATED
    assert results["probe_numpy.bad"].outcome is Outcome.VIOLATED


def test_ending_the_process_midway_does_not_hide_the_probes_after_it(tmp_path):
    """The candidate ends its process in the first probe it is called in: the later ones are not spared."""
    suffix = "\n\ndef net(params, x):\n    import os\n    os._exit(0)\n"
    results = matched(attacked(tmp_path, suffix=suffix), tmp_path)
    for pid in MATCHED:
        assert results[pid].outcome is Outcome.VIOLATED, (pid, results[pid].observations)


def test_a_stripped_traceback_does_not_hide_a_crash(tmp_path):
    results = matched(attacked(tmp_path, suffix=STRIPPED), tmp_path)
    for pid in ("np.affine", "np.net"):
        assert results[pid].outcome is Outcome.VIOLATED, (pid, results[pid].observations)


def test_a_probe_failing_in_its_own_code_is_still_not_established(tmp_path):
    results = matched(attacked(tmp_path), tmp_path)
    assert results["np.misfit"].outcome is Outcome.NOT_ESTABLISHED
    assert "calling convention" in results["np.misfit"].observations["message"]
    ctx = make_context(load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path / "checks")
    (misfit,) = file_checks(str(NUMPY_PROBES), ["misfit"])(ctx)
    assert misfit.outcome is Outcome.NOT_ESTABLISHED
