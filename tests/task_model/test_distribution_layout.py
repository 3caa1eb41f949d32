"""Laying out a declared original: bounded, streamed, hash-checked, selected with a set, keyed by JSON.

Every wheel is built here and served from a local index (`tests/fakes/wheels.py`): no network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
import zipfile

import pytest
from pydantic import ValidationError

from task_model import distribution
from task_model.distribution import (
    DistributionError,
    is_materialized,
    manifest_path,
    materialize,
    original_dir,
    select_members,
)
from tests.benchmark_adapter.test_distribution import FILES, declaration
from tests.fakes.wheels import build_wheel


def _nothing_cached(original) -> bool:
    target = original_dir(original)
    return (
        not target.exists()
        and not manifest_path(target).exists()
        and not [p for p in target.parent.glob(".*") if p.name.startswith(f".{target.name}")]
    )


def test_a_member_over_its_cap_is_refused_while_streamed(local_index, monkeypatch):
    original = declaration(build_wheel(local_index, {**FILES, "fakeorig/sub/big.bin": "x" * 5000}))
    monkeypatch.setattr(distribution, "MAX_MEMBER_BYTES", 4096)
    with pytest.raises(DistributionError, match=r"'fakeorig/sub/big.bin' takes the layout over its cap") as caught:
        materialize(original)
    assert "\n" not in str(caught.value)
    assert _nothing_cached(original)
    monkeypatch.setattr(distribution, "MAX_MEMBER_BYTES", 8192)
    assert (materialize(original) / "fakeorig" / "sub" / "big.bin").stat().st_size == 5000


def test_the_total_of_a_layout_is_capped(local_index, monkeypatch):
    files = {**FILES, "fakeorig/sub/a.bin": "a" * 3000, "fakeorig/sub/b.bin": "b" * 3000}
    original = declaration(build_wheel(local_index, files))
    monkeypatch.setattr(distribution, "MAX_TOTAL_BYTES", 5000)
    with pytest.raises(DistributionError, match="over its cap"):
        materialize(original)
    assert _nothing_cached(original)


def test_a_wheel_with_too_many_members_is_refused(local_index, monkeypatch):
    original = declaration(build_wheel(local_index, FILES))
    monkeypatch.setattr(distribution, "MAX_MEMBERS", 5)  # 4 files and 3 dist-info entries
    with pytest.raises(DistributionError, match="holds 7 members, over 5: refused"):
        materialize(original)
    assert _nothing_cached(original)


def test_a_member_named_twice_in_the_wheel_is_refused(local_index):
    wheel = build_wheel(local_index, FILES)
    with zipfile.ZipFile(wheel, "a") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate it is told to write
        archive.writestr("fakeorig/model.py", "import os\nos.system('id')\n")
    with pytest.raises(DistributionError, match="holds 'fakeorig/model.py' twice: refused"):
        materialize(declaration(wheel))


def test_a_member_is_checked_against_the_wheels_record(local_index):
    wheel = build_wheel(local_index, FILES)
    real = base64.urlsafe_b64encode(hashlib.sha256(FILES["fakeorig/model.py"].encode()).digest()).rstrip(b"=")
    wrong = base64.urlsafe_b64encode(hashlib.sha256(b"something else").digest()).rstrip(b"=")
    for stated, accepted in ((real, True), (wrong, False)):
        rebuilt = local_index / "rebuilt" / wheel.name
        rebuilt.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rebuilt, "w") as archive:
            for name in source.namelist():
                text = source.read(name)
                if name.endswith("RECORD"):
                    text = f"fakeorig/model.py,sha256={stated.decode()},{len(FILES['fakeorig/model.py'])}\n".encode()
                archive.writestr(name, text)
        rebuilt.replace(wheel)
        original = declaration(wheel)
        if accepted:
            assert (materialize(original) / "fakeorig" / "model.py").is_file()
        else:
            with pytest.raises(DistributionError, match="'fakeorig/model.py' is not the file its RECORD hashes"):
                materialize(original)
            assert _nothing_cached(original)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["fakeorig/model.py", "fakeorig/model.py"], "declared twice"),
        (["fakeorig/sub/", "fakeorig/sub"], "declared twice"),
        (["fakeorig", "fakeorig/model.py"], "lies inside 'fakeorig', also declared"),
        (["fakeorig/sub", "fakeorig/sub/helpers.py"], "lies inside 'fakeorig/sub'"),
        (["fakeorig/model.py\nfakeorig/__init__.py"], "without control characters"),
    ],
)
def test_duplicate_nested_or_control_character_files_entries_are_refused(local_index, files, message):
    wheel = build_wheel(local_index, FILES)
    with pytest.raises(ValidationError, match=message):
        declaration(wheel, files=files)


def test_selection_takes_each_declared_path_once_from_a_set():
    names = [f"pkg/d{i}/f{j}.py" for i in range(300) for j in range(400)] + ["pkg/__init__.py"]
    declared = ["pkg/__init__.py", *[f"pkg/d{i}" for i in range(0, 300, 2)]]
    chosen = select_members(names, declared, "pkg.whl")
    assert len(chosen) == 1 + 150 * 400 and len(set(chosen)) == len(chosen)
    assert chosen[0] == "pkg/__init__.py" and all(c.startswith(("pkg/d", "pkg/__")) for c in chosen)
    assert {c.split("/")[1] for c in chosen[1:]} == {f"d{i}" for i in range(0, 300, 2)}
    assert select_members(["pkg/d10/x.py", "pkg/d1/y.py"], ["pkg/d1"], "w") == ["pkg/d1/y.py"]  # not d10


def test_the_cache_key_is_json_of_the_selection(local_index):
    original = declaration(build_wheel(local_index, FILES))
    key = hashlib.sha256(json.dumps(distribution.selection(original), sort_keys=True).encode()).hexdigest()[:32]
    assert original_dir(original).name == f"fakeorig-1.0-{key}"
    assert original_dir(
        declaration(build_wheel(local_index, FILES), files=["fakeorig/sub/", "fakeorig/model.py"])
    ) == original_dir(declaration(build_wheel(local_index, FILES), files=["fakeorig/model.py", "fakeorig/sub"]))


def test_a_cached_layout_is_rechecked_against_its_declaration(local_index):
    """A layout planted at a declaration's key (another task's, or a damaged one) is never taken as it."""
    wheel = build_wheel(local_index, FILES)
    lacking = declaration(wheel, files=["fakeorig/missing.py"])
    planted = original_dir(lacking)
    (planted / "fakeorig").mkdir(parents=True)
    (planted / "fakeorig" / "missing.py").write_text("planted\n")
    assert not is_materialized(lacking)
    with pytest.raises(DistributionError, match="has no file 'fakeorig/missing.py'"):
        materialize(lacking)
    assert not planted.exists()
    whole = declaration(wheel)
    laid_out = materialize(whole)
    assert is_materialized(whole)
    recorded = json.loads(manifest_path(laid_out).read_text())
    manifest_path(laid_out).write_text(json.dumps({**recorded, "selection": distribution.selection(lacking)}))
    assert not is_materialized(whole)  # a manifest made for another declaration
    assert materialize(whole) == laid_out and is_materialized(whole)
    (laid_out / "fakeorig" / "model.py").write_text("changed\n")
    assert not is_materialized(whole)  # a file that changed size since
    assert (materialize(whole) / "fakeorig" / "model.py").read_text() == FILES["fakeorig/model.py"]


@pytest.mark.timeout(60)  # a scan per declared path (the old selection) takes hours here; a set takes a second
def test_selection_stays_linear_at_scale():
    names = [f"pkg/m{i:06d}.py" for i in range(120_000)]
    declared = names[::2]
    assert select_members(names, declared, "pkg.whl") == declared
