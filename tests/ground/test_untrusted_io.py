"""The single-file layer for directories another uid can write: no link followed, no FIFO waited on."""

from __future__ import annotations

import os
import time

import pytest

from ground import untrusted_io
from ground.untrusted_io import (
    AgentFileError,
    Folder,
    overwrite_regular,
    read_regular,
    read_regular_text,
    write_atomic,
)


def test_read_refuses_links_fifos_and_directories(tmp_path):
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.mkfifo(tmp_path / "fifo")
    for name, why in (("link", "symbolic link"), ("fifo", "FIFO"), (".", "directory")):
        with pytest.raises(AgentFileError, match=why):
            read_regular(tmp_path / name, 10)
    assert read_regular(tmp_path / "real", 10) == (b"x", 1)


def test_a_file_over_the_cap_is_refused_by_its_size_unread(tmp_path):
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as fh:
        fh.truncate(1 << 30)
    with pytest.raises(AgentFileError, match="over the 1024-byte cap"):
        read_regular_text(sparse, 1024)
    data, size = read_regular(sparse, 4)
    assert data == b"\0" * 4 and size == 1 << 30


def test_the_deadline_holds_while_a_read_is_pending(tmp_path, monkeypatch):
    (tmp_path / "slow").write_text("x")
    real = untrusted_io._read
    monkeypatch.setattr(untrusted_io, "_read", lambda *a: (time.sleep(3), real(*a))[1])
    started = time.monotonic()
    with pytest.raises(AgentFileError, match="not read within 0.2 s"):
        read_regular(tmp_path / "slow", 10, deadline_s=0.2)
    assert time.monotonic() - started < 1.5
    monkeypatch.setattr(untrusted_io, "_read", real)
    assert read_regular(tmp_path / "slow", 10, deadline_s=5) == (b"x", 1)


def test_write_atomic_replaces_a_link_at_the_final_name_and_never_follows_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "out.json").symlink_to(victim)
    write_atomic(folder, "out.json", b"new")
    assert victim.read_text() == "keep"
    assert not (folder / "out.json").is_symlink() and (folder / "out.json").read_bytes() == b"new"
    assert sorted(os.listdir(folder)) == ["out.json"]  # no temporary name left


def test_overwrite_regular_refuses_a_link_and_a_fifo(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError):
        overwrite_regular(tmp_path / "link", b"x")
    with pytest.raises(OSError):  # no reader: ENXIO at once, never a blocked open
        overwrite_regular(tmp_path / "fifo", b"x")
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        overwrite_regular(tmp_path / "dir", b"x")
    assert victim.read_text() == "keep"
    overwrite_regular(tmp_path / "new.py", b"print(1)\n")
    assert (tmp_path / "new.py").read_text() == "print(1)\n"


def test_a_folder_holds_its_directory_even_when_the_path_is_swapped_for_a_link(tmp_path):
    inbox, elsewhere = tmp_path / "inbox", tmp_path / "elsewhere"
    inbox.mkdir()
    elsewhere.mkdir()
    folder = Folder(inbox)
    inbox.rename(tmp_path / "moved")
    inbox.symlink_to(elsewhere)
    folder.write("request-1.json", "{}")
    assert os.listdir(elsewhere) == [] and folder.names() == ["request-1.json"]
    assert (tmp_path / "moved" / "request-1.json").read_text() == "{}"
    with pytest.raises(OSError):
        Folder(inbox)  # a link itself is never opened as the folder
