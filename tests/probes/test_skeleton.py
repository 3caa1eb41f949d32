"""`twin probe --init`: the probe-file skeleton of an original (probes/skeleton.py)."""

from __future__ import annotations

import ast

from probes import skeleton
from probes.probe_format import probe_names


def _repo(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self, d: int,\n"
        "                 h: int = 4,\n    ):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return x\n\n    def _private(self):\n        pass\n\n\n"
        "def apply(net, x):\n    return net(x)\n\n\ndef _helper():\n    pass\n"
    )
    (root / "pkg" / "_internal.py").write_text("def hidden():\n    pass\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_model.py").write_text("def test_x():\n    pass\n")
    (root / "broken.py").write_text("def (:\n")
    return root


def test_public_components_with_their_signatures_on_one_line(tmp_path):
    found = {c.dotted: c for c in skeleton.public_components(_repo(tmp_path))}
    assert sorted(found) == ["pkg.model.Net", "pkg.model.apply"]
    assert found["pkg.model.Net"].signature == "self, d: int, h: int = 4"
    assert found["pkg.model.Net"].methods == ["forward(self, x)"]


def test_the_skeleton_is_a_valid_probe_file_with_one_probe_per_component(tmp_path):
    text = skeleton.probe_skeleton(_repo(tmp_path / "src"))
    path = tmp_path / "probes.py"
    path.write_text(text)
    ast.parse(text)
    names = probe_names(path)
    assert set(names) == {"pkg_model_net", "pkg_model_apply"}
    assert names["pkg_model_net"]["component"] == "pkg.model.Net"


def test_more_components_than_probes_are_listed_not_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(skeleton, "MAX_PROBES", 1)
    text = skeleton.probe_skeleton(_repo(tmp_path))
    assert "def reference_pkg_model_net(env):" in text and "def reference_pkg_model_apply" not in text
    assert "#   pkg.model.apply" in text


def test_an_original_without_public_code_still_gets_a_valid_file(tmp_path):
    (tmp_path / "src").mkdir()
    path = tmp_path / "probes.py"
    path.write_text(skeleton.probe_skeleton(tmp_path / "src"))
    assert set(probe_names(path)) == {"example"}


def test_the_skeleton_reads_the_original_as_the_audit_does_links_and_environments_left_out(tmp_path):
    root = _repo(tmp_path / "src")
    (tmp_path / "outside.py").write_text("def leaked():\n    pass\n")
    (root / "linked.py").symlink_to(tmp_path / "outside.py")
    (root / "venv" / "lib").mkdir(parents=True)
    (root / "venv" / "lib" / "site.py").write_text("def installed():\n    pass\n")
    (root / "__init__.py").write_text("def top():\n    pass\n")
    found = sorted(c.dotted for c in skeleton.public_components(root))
    assert found == ["pkg.model.Net", "pkg.model.apply", "src.top"]
