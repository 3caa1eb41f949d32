"""The import check `twin task fetch` ends with: the reference side imports what the probes use, or says why not."""

from __future__ import annotations

from harness.cli.app import main
from probes.reference_imports import original_modules, probe_modules
from tests.benchmark_adapter.test_distribution import declaration, own_task
from tests.fakes.wheels import build_wheel, local_index  # noqa: F401  (a local index and a fresh twin cache)

PROBE = """
import json
from fakeorig import model


def reference_forward(env):
    import fakeorig.sub.helpers
    from torch import nn
    return {}


def candidate_forward(env):
    import jax
    from fakeorig_port import model
    return {}
"""


def test_the_modules_are_the_probes_imports_outside_candidate_functions(tmp_path):
    assert probe_modules(PROBE) == ["json", "fakeorig", "fakeorig.sub.helpers", "torch"]
    assert probe_modules("def broken(:\n") == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "not_a_package").mkdir()
    (tmp_path / "top.py").write_text("")
    (tmp_path / "bad-name.py").write_text("")
    assert original_modules(tmp_path) == ["pkg", "top"]


def test_twin_task_fetch_fails_with_the_imports_own_message(local_index, tmp_path, capsys):  # noqa: F811
    files = {"fakeorig/__init__.py": "import not_installed_anywhere\n", "fakeorig/model.py": "X = 1\n"}
    root = own_task(tmp_path / "task", declaration(build_wheel(local_index, files), files=["fakeorig"]))
    (root / "tests" / "probes").mkdir()
    (root / "tests" / "probes" / "p.py").write_text(PROBE)
    assert main(["task", "fetch", str(root), "--sandbox", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (
        "the reference side cannot import fakeorig: ModuleNotFoundError: No module named 'not_installed_anywhere'"
        in err
    )
    fixed = build_wheel(local_index, {"fakeorig/__init__.py": "import json\n"}, version="1.1")
    good = own_task(tmp_path / "good", declaration(fixed, version="1.1", files=["fakeorig"]))
    assert main(["task", "fetch", str(good), "--sandbox", "none"]) == 0
    assert "the reference side imports fakeorig" in capsys.readouterr().out
