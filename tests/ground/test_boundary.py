"""The boundary: path resolution in the sandbox's namespace, refusals, and the audit log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from ground.boundary import Boundary, BoundaryViolation, Mount


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("cand", "src", "task", "elsewhere")}
    for path in paths.values():
        path.mkdir()
    (paths["src"] / "a.txt").write_text("source")
    (paths["task"] / "tests").mkdir()
    (paths["task"] / "tests" / "secret").write_text("hidden")
    (paths["elsewhere"] / "b.txt").write_text("elsewhere")
    (paths["src"] / "inner_hidden").mkdir()
    (paths["src"] / "inner_hidden" / "c.txt").write_text("covered")
    paths["audit"] = tmp_path / "run" / "audit.log"
    return paths


def make(layout, **kwargs) -> Boundary:
    fields = dict(
        name="migrator",
        mounts=[
            Mount(host=layout["cand"], inside="/app", writable=True),
            Mount(host=layout["src"], inside="/source"),
        ],
        hidden=[layout["task"] / "tests", layout["src"] / "inner_hidden"],
        workdir="/app",
        audit_log=layout["audit"],
    )
    fields.update(kwargs)
    return Boundary(**fields)


def audit(layout) -> list[dict]:
    return [json.loads(line) for line in layout["audit"].read_text().splitlines()]


def test_paths_map_to_their_mount(layout):
    b = make(layout)
    assert b.check_read("/source/a.txt") == (layout["src"] / "a.txt").resolve()
    assert b.check_read("../source/a.txt") == (layout["src"] / "a.txt").resolve()
    assert b.check_write("/app/new/file.py") == (layout["cand"] / "new" / "file.py").resolve()
    assert b.check_read("/proc/self/root/source/a.txt") == (layout["src"] / "a.txt").resolve()
    assert b.check_read("/proc/1/cwd/../source/a.txt") == (layout["src"] / "a.txt").resolve()


def test_symlink_targets_are_read_inside_the_sandbox(layout):
    (layout["cand"] / "to_source").symlink_to("/source/a.txt")
    (layout["cand"] / "relative").symlink_to("../source/a.txt")
    b = make(layout)
    assert b.check_read("/app/to_source") == (layout["src"] / "a.txt").resolve()
    assert b.check_read("/app/relative") == (layout["src"] / "a.txt").resolve()
    assert b.resolve_inside("/app/relative") == "/source/a.txt"


@pytest.mark.parametrize(
    "plant, request_path",
    [
        ("host-absolute", "/app/link/b.txt"),
        ("host-to-hidden", "/app/link/secret"),
        ("loop", "/app/link"),
    ],
)
def test_planted_symlinks_are_refused_and_audited(layout, plant, request_path):
    link = layout["cand"] / "link"
    if plant == "host-absolute":
        link.symlink_to(layout["elsewhere"])
    elif plant == "host-to-hidden":
        link.symlink_to(layout["task"] / "tests")
    else:
        link.symlink_to("/app/link")
    b = make(layout)
    with pytest.raises(BoundaryViolation):
        b.check_read(request_path)
    assert audit(layout)[-1]["target"] == request_path


def test_outside_every_mount_is_refused(layout):
    b = make(layout)
    for path in (str(layout["elsewhere"] / "b.txt"), "/etc/passwd", "../../" + str(layout["task"])):
        with pytest.raises(BoundaryViolation, match="outside every mounted root"):
            b.check_read(path)
    assert len(audit(layout)) == 3


def test_hidden_root_under_a_mount_is_refused(layout):
    b = make(layout)
    with pytest.raises(BoundaryViolation, match="hidden root"):
        b.check_read("/source/inner_hidden/c.txt")


def test_read_only_mount_refuses_writes(layout):
    b = make(layout)
    with pytest.raises(BoundaryViolation, match="read-only"):
        b.check_write("/source/a.txt")
    entry = audit(layout)[-1]
    assert entry == {**entry, "boundary": "migrator", "action": "write", "target": "/source/a.txt"}


def test_hard_links_to_hidden_files_are_refused(layout):
    os.link(layout["task"] / "tests" / "secret", layout["cand"] / "alias")
    (layout["cand"] / "own").write_text("x")
    os.link(layout["cand"] / "own", layout["cand"] / "own2")
    b = make(layout)
    with pytest.raises(BoundaryViolation, match="hard link to a hidden file"):
        b.check_read("/app/alias")
    assert b.check_read("/app/own2") == (layout["cand"] / "own2").resolve()
    with pytest.raises(BoundaryViolation, match="several hard links"):
        b.check_write("/app/own2")


def test_construction_rejects_unsafe_boundaries(layout):
    with pytest.raises(ValidationError, match="more than one writable"):
        make(
            layout,
            mounts=[
                Mount(host=layout["cand"], inside="/app", writable=True),
                Mount(host=layout["src"], inside="/source", writable=True),
            ],
        )
    with pytest.raises(ValidationError, match="lies in a hidden root"):
        make(layout, mounts=[Mount(host=layout["task"] / "tests", inside="/tests")])
    with pytest.raises(ValidationError, match="not absolute"):
        make(layout, mounts=[Mount(host=layout["cand"], inside="app")])
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"):
        with pytest.raises(ValidationError, match="looks like a secret"):
            make(layout, env_allow=[name])
    assert not layout["audit"].exists()


def test_a_non_executable_root_confines_the_whole_boundary_and_allows_no_writable_root(layout):
    handed = Mount(host=layout["src"], inside="/scratch", executable=False)
    assert make(layout, mounts=[Mount(host=layout["cand"], inside="/app"), handed]).code_confined
    assert not make(layout, mounts=[Mount(host=layout["cand"], inside="/app")]).code_confined
    with pytest.raises(ValidationError, match="writable root beside a non-executable one"):
        make(layout, mounts=[Mount(host=layout["cand"], inside="/app", writable=True), handed])


def test_no_audit_log_still_refuses(layout):
    b = make(layout, audit_log=None)
    with pytest.raises(BoundaryViolation):
        b.check_read("/nowhere")
    assert not layout["audit"].exists()


def test_inside_of_maps_a_host_path_through_the_innermost_mount(layout):
    nested = layout["src"] / "pkg"
    nested.mkdir()
    b = make(layout, mounts=[Mount(host=layout["src"], inside="/source"), Mount(host=nested, inside="/deep")])
    assert b.inside_of(layout["src"] / "a.txt") == "/source/a.txt"
    assert b.inside_of(layout["src"]) == "/source"
    assert b.inside_of(nested / "sub" / "c.txt") == "/deep/sub/c.txt"
    assert b.inside_of(layout["elsewhere"] / "b.txt") is None
