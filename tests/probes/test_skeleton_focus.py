"""`twin probe --init F --module M [--class C]`: a skeleton of the named modules, most depended-on first."""

from __future__ import annotations

import pytest

from harness.cli.app import main
from probes.probe_format import probe_names
from probes.skeleton import probe_skeleton
from probes.skeleton_focus import FocusError, focused_components
from tests.fakes.deep_package import FILES


@pytest.fixture
def source(tmp_path):
    """The test-sized timm-shaped package, laid out as a task's original is."""
    root = tmp_path / "src"
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_a_packages_components_come_most_depended_on_first(source):
    found = focused_components(source, ["deeppkg.layers"])
    # Norm is used by the MLP and the attention and re-exported; each of the others by the vision model only
    assert [c.dotted for c in found] == [
        "deeppkg.layers.norm.Norm",
        "deeppkg.layers.attention.Attention",
        "deeppkg.layers.mlp.Mlp",
    ]


def test_a_module_and_a_class_aim_the_skeleton_at_it_alone(source, tmp_path):
    found = focused_components(source, ["deeppkg.models.vision"])
    assert [c.name for c in found] == ["VisionNet", "pool", "vision_tiny"]  # the class, used by vision_tiny, first
    (only,) = focused_components(source, ["deeppkg.models.vision"], ["VisionNet"])
    assert only.methods == ["forward(self, x)", "forward_features(self, x)"]
    path = tmp_path / "probes.py"
    path.write_text(probe_skeleton(source, "/app/torch_orig", [only]))
    assert set(probe_names(path)) == {"deeppkg_models_vision_visionnet"}
    assert "Zoo" not in path.read_text()  # nothing of the zoo, first in no order


def test_an_unknown_module_or_class_is_refused(source):
    with pytest.raises(FocusError, match="--module deeppkg.nope: no such module under"):
        focused_components(source, ["deeppkg.nope"])
    with pytest.raises(FocusError, match="--class Nope: not a class of deeppkg.models.vision"):
        focused_components(source, ["deeppkg.models.vision"], ["Nope"])
    with pytest.raises(FocusError, match="--class pool"):  # a function is not a class
        focused_components(source, ["deeppkg.models.vision"], ["pool"])


def test_the_cli_writes_the_aimed_skeleton_and_refuses_bad_use_in_one_line(source, tmp_path, capsys):
    out = tmp_path / "p.py"
    args = ["probe", "--task", str(source), "--init", str(out), "--module", "deeppkg.models.vision"]
    assert main([*args, "--class", "VisionNet"]) == 0
    assert set(probe_names(out)) == {"deeppkg_models_vision_visionnet"}
    capsys.readouterr()
    cases = [
        (["--init", str(tmp_path / "a.py"), "--module", "deeppkg.nope"], "no such module"),
        (["--init", str(tmp_path / "a.py"), "--class", "VisionNet"], "--class needs --module"),
        (["--candidate", str(tmp_path), "--module", "deeppkg.models"], "give --init too"),
    ]
    for extra, said in cases:
        assert main(["probe", "--task", str(source), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1
        assert not (tmp_path / "a.py").exists()
