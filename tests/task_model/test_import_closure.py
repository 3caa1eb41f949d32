"""The static import closure of a distribution's modules, on a test-sized package shaped like timm."""

from __future__ import annotations

import pytest

from task_model import import_closure
from task_model.import_closure import choose_files, module_name, wheel_closure
from task_model.import_closure import import_closure as closure_of
from tests.fakes.deep_package import FILES, VISION_CLOSURE, ZOO_MODELS
from tests.fakes.wheels import build_wheel


def test_the_closure_follows_init_chains_and_relative_and_deep_imports(tmp_path):
    closure = wheel_closure(build_wheel(tmp_path, FILES, name="deeppkg"), ["deeppkg.models.vision"])
    assert closure.files == VISION_CLOSURE  # __init__ chains, `from ..layers`, four imports deep; nothing unused
    assert closure.external == ["companion", "math", "torch"]  # named, never followed
    assert len(closure.modules) == len(VISION_CLOSURE)
    assert closure.lines == sum(FILES[p].count("\n") for p in VISION_CLOSURE)


def test_lines_using_torch_count_torch_and_the_names_imported_from_it():
    closure = closure_of(FILES, ["deeppkg.layers.norm"])
    norm = next(m for m in closure.modules if m.name == "deeppkg.layers.norm")
    # `torch.ones`, `nn.Module`, `nn.Parameter` (one line), `torch.sqrt`
    assert norm.torch_lines == 3
    assert next(m for m in closure.modules if m.name == "deeppkg.utils.helpers").torch_lines == 0


def test_the_size_line_stands_beside_t2js_scale_and_a_small_closure_has_no_warning():
    closure = closure_of(FILES, ["deeppkg.utils.helpers"])
    assert [m.name for m in closure.modules] == ["deeppkg", *sorted(
        n for n in ("deeppkg.layers", "deeppkg.layers.attention", "deeppkg.layers.mlp", "deeppkg.layers.norm",
                    "deeppkg.models", "deeppkg.models._registry", "deeppkg.models.vision", "deeppkg.models.zoo",
                    "deeppkg.utils", "deeppkg.utils.helpers", "deeppkg.version"))]  # fmt: skip
    line = closure.size_line()
    assert line.startswith(
        f"closure of deeppkg.utils.helpers: {len(closure.modules)} modules, {closure.lines:,} lines,"
    )
    assert line.endswith("using torch (T2J tasks: about 4,000 lines in 15-20 modules)")
    assert closure.warning_lines() == []


def test_a_large_closure_names_what_pulls_in_the_most(monkeypatch):
    monkeypatch.setattr(import_closure, "LARGE_LINES", 100)
    closure = closure_of(FILES, ["deeppkg.models.vision"])
    warning, *pulls = closure.warning_lines()
    assert warning.startswith(f"warning: the closure is {closure.lines:,} lines, over 100:")
    zoo_lines = FILES["deeppkg/models/zoo.py"].count("\n")
    models_lines = FILES["deeppkg/models/__init__.py"].count("\n")
    # the models package's __init__ brings the zoo: without it, neither would be there
    assert pulls[0] == (
        f"  deeppkg.models (deeppkg/models/__init__.py, imported at deeppkg/__init__.py:2): "
        f"2 modules, {zoo_lines + models_lines:,} lines only through it"
    )
    assert pulls[1].startswith("  deeppkg.models.zoo (deeppkg/models/zoo.py, imported at deeppkg/models/__init__.py:3)")
    assert zoo_lines > 8 * ZOO_MODELS and len(pulls) == 3


def test_an_unknown_module_is_a_key_error_and_unparsable_files_are_counted_without_imports():
    with pytest.raises(KeyError):
        closure_of(FILES, ["deeppkg.nothing"])
    broken = closure_of({**FILES, "deeppkg/version.py": "def (:\n"}, ["deeppkg.version"])
    assert "deeppkg/version.py" in broken.files


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("a/b/c.py", "a.b.c"),
        ("a/b/__init__.py", "a.b"),
        ("a/b.txt", None),
        ("x.dist-info/y.py", None),
        ("a-b/c.py", None),
    ],
)
def test_module_names_of_wheel_paths(path, name):
    assert module_name(path) == name


def test_files_chosen_are_the_includes_and_the_closure_less_the_excludes():
    names = sorted(FILES)
    closure = ["deeppkg/__init__.py", "deeppkg/version.py"]
    assert choose_files(names, ["deeppkg/layers"], closure, []) == ["deeppkg/layers", *closure]
    kept = choose_files(names, ["deeppkg/layers"], closure, ["deeppkg/layers/mlp.py"])
    assert "deeppkg/layers/mlp.py" not in kept and "deeppkg/layers/norm.py" in kept and "deeppkg/version.py" in kept
    with pytest.raises(ValueError, match="--exclude deeppkg/nope: the wheel has no such file"):
        choose_files(names, [], closure, ["deeppkg/nope"])
    with pytest.raises(ValueError, match="leaves no file"):
        choose_files(names, [], closure, ["deeppkg"])
