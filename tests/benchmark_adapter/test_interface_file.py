"""`twin task new --interface`: names, or a file of signatures with one-line descriptions, nested."""

from __future__ import annotations

import pytest

from benchmark_adapter.grading.authoring import _render, interface_note, twin_metadata
from benchmark_adapter.grading.interface_file import interface_entries, read_interface_file
from task_model.model import TaskError

VIT = """\
# the port keeps these
timm.models.vision_transformer  # the ViT family
  class VisionTransformer(img_size=224, patch_size=16, embed_dim=768)  # a ViT classifier
    forward(x) -> logits [batch, classes]  # the whole forward pass
    forward_features(x) -> tokens [batch, tokens, dim]
  vit_base_patch16_224(**kwargs) -> VisionTransformer  # the model of this config
  default_cfgs: dict[str, dict]  # pretrained configurations, by name
CONFIG = {"depth": 12, "heads": 12}  # a config dict
"""


def test_a_file_gives_modules_classes_methods_and_functions_nested(tmp_path):
    path = tmp_path / "interface.txt"
    path.write_text(VIT)
    entries = read_interface_file(path)
    assert [(e.kind, e.depth, e.module) for e in entries] == [
        ("module", 0, None),
        ("class", 1, "timm.models.vision_transformer"),
        ("method", 2, "timm.models.vision_transformer"),
        ("method", 2, "timm.models.vision_transformer"),
        ("function", 1, "timm.models.vision_transformer"),
        ("function", 1, "timm.models.vision_transformer"),
        ("name", 0, None),
    ]
    assert entries[2].signature == "forward(x) -> logits [batch, classes]"
    assert entries[2].description == "the whole forward pass" and entries[3].description == ""
    # a constant is no function an interface check could call
    assert [e.function for e in entries if e.function] == ["timm.models.vision_transformer:vit_base_patch16_224"]


def test_the_instruction_lists_the_entries_as_a_nested_list_and_task_toml_the_functions(tmp_path):
    path = tmp_path / "interface.txt"
    path.write_text(VIT)
    entries = interface_entries([str(path), "extra.mod:helper(a, b) -> c"])
    text = _render("instruction.md.j2", name="vit", original_mount="/app/torch_orig", assets_mount="",
                   output="/app/jax_repo", interface_lines=[e.markdown() for e in entries])  # fmt: skip
    assert "  - `timm.models.vision_transformer`: the ViT family\n" in text
    assert "    - `class VisionTransformer(img_size=224, patch_size=16, embed_dim=768)`: a ViT classifier\n" in text
    assert "      - `forward(x) -> logits [batch, classes]`: the whole forward pass\n" in text
    assert "      - `forward_features(x) -> tokens [batch, tokens, dim]`\n" in text
    assert '  - `CONFIG = {"depth": 12, "heads": 12}`: a config dict\n' in text
    assert "  - `extra.mod:helper(a, b) -> c`\n" in text
    functions = [e.function for e in entries if e.function]
    toml = twin_metadata(["model.py"], functions)
    assert '# function = "timm.models.vision_transformer:vit_base_patch16_224"' in toml
    assert '# function = "extra.mod:helper"' in toml  # a signature after the name still names the function
    assert "complete the commented" in interface_note(functions)


def test_a_backtick_in_a_signature_keeps_its_code_span_whole(tmp_path):
    (entry,) = interface_entries(["f(x=`a`)"])
    assert entry.markdown() == "  - `` f(x=`a`) ``"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "has no entry"),
        ("# only a comment\n", "has no entry"),
        ("pkg.mod\n      deep(x)\n", ":2: indented deeper than the line it belongs under"),
        ("f(x)  # " + "long " * 100 + "\n", ":1: a line over 400 characters"),
        ("f(x)\x1b[31m\n", ":1: a control character"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(tmp_path, text, said):
    path = tmp_path / "interface.txt"
    path.write_text(text)
    with pytest.raises(TaskError) as caught:
        read_interface_file(path)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_not_text_is_refused(tmp_path):
    path = tmp_path / "interface.txt"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TaskError, match="not UTF-8"):
        read_interface_file(path)


def test_a_missing_file_is_not_taken_for_a_name(tmp_path):
    with pytest.raises(TaskError, match="interface file not found: .*missing.txt"):
        interface_entries([str(tmp_path / "missing.txt")])
