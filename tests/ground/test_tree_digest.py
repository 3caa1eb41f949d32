"""The content digest tells trees apart whenever a sandbox would see them differ, and only then."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ground.tree_digest import content_digest


def files(root: Path, contents: dict[str, bytes], mode: int = 0o644) -> Path:
    root.mkdir(parents=True)
    os.chmod(root, 0o755)
    for name, data in contents.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        os.chmod(root / name, mode)
    return root


def test_a_file_whose_bytes_spell_the_next_entry_does_not_pass_for_two_files(tmp_path):
    # Under an encoding without lengths, `a` followed by the record of `b` is the same stream
    # as one file `a` that holds that record in its bytes.
    header = f"\0b\0{stat.S_IFREG}:{0o644:o}\0".encode()
    two = files(tmp_path / "two", {"a": b"x", "b": b"y"})
    one = files(tmp_path / "one", {"a": b"x" + header + b"y"})
    assert content_digest(two) != content_digest(one)


def test_bytes_moved_from_one_file_to_the_next_change_the_digest(tmp_path):
    assert content_digest(files(tmp_path / "p", {"a": b"xy", "b": b""})) != content_digest(
        files(tmp_path / "q", {"a": b"x", "b": b"y"})
    )


def test_a_name_cannot_pass_for_a_path_one_level_down(tmp_path):
    nested = files(tmp_path / "nested", {"a/b": b"z"})
    flat = files(tmp_path / "flat", {"ab": b"z"})
    assert content_digest(nested) != content_digest(flat)


def test_an_empty_folder_and_an_empty_file_of_one_name_differ(tmp_path):
    folder = files(tmp_path / "d", {})
    (folder / "x").mkdir(mode=0o644)
    os.chmod(folder / "x", 0o644)
    plain = files(tmp_path / "f", {"x": b""})
    assert content_digest(folder) != content_digest(plain)


def test_the_same_content_gives_the_same_digest_wherever_it_lies(tmp_path):
    contents = {"a": b"x" * 5000, "sub/b": b"", "sub/__pycache__/c.pyc": b"\x00\x01"}
    assert content_digest(files(tmp_path / "one", contents)) == content_digest(files(tmp_path / "two", contents))


def test_a_hidden_path_is_left_out_of_its_folder_list_too(tmp_path):
    with_secret = files(tmp_path / "one", {"a": b"x", "secret/s": b"1"})
    without = files(tmp_path / "two", {"a": b"x"})
    assert content_digest(with_secret, hidden=[with_secret / "secret"]) == content_digest(without)
    assert content_digest(with_secret) != content_digest(without)


def test_a_tree_over_the_cap_has_no_digest(tmp_path):
    root = files(tmp_path / "t", {f"f{i}": b"" for i in range(5)})
    assert content_digest(root, max_entries=5) is None
    assert content_digest(root, max_entries=6) is not None
