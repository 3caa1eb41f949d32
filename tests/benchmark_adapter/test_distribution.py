"""A task's original declared as a pinned distribution: fetched with pip, checked by hash, laid out in the cache.

Every test serves its wheels from a local index (`tests/fakes/wheels.py`): no network.
"""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from harness.cli.app import main
from harness.run.workspace import prepare_workspace
from task_model import distribution
from task_model.distribution import DistributionError, materialize, original_dir
from task_model.loader import load_task
from task_model.original import OriginalDistribution
from tests.fakes.wheels import build_wheel

FILES = {
    "fakeorig/__init__.py": "",
    "fakeorig/model.py": "import torch\n\n\ndef forward(x):\n    return torch.relu(x)\n",
    "fakeorig/sub/helpers.py": "SCALE = 2\n",
    "fakeorig/unused.py": "print('not laid out')\n",
}
DECLARED = ["fakeorig/__init__.py", "fakeorig/model.py", "fakeorig/sub"]


def declaration(wheel, **changes) -> OriginalDistribution:
    values = dict(
        distribution="fakeorig", version="1.0", wheel=wheel.name,
        sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), license="Apache-2.0", files=DECLARED,
    )  # fmt: skip
    return OriginalDistribution(**{**values, **changes})


def toml_table(original: OriginalDistribution) -> str:
    lines = ["[metadata.twin.original]"]
    for key, value in original.model_dump(exclude_none=True).items():
        shown = "true" if value is True else "false" if value is False else repr(value).replace("'", '"')
        lines.append(f"{key} = {shown}")
    return "\n".join(lines) + "\n"


def own_task(root, original: OriginalDistribution):
    """A task in twin's own layout whose original is `original` (nothing under environment/source)."""
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (root / "instruction.md").write_text("Port fakeorig to JAX in /app.\n")
    (root / "task.toml").write_text(
        'version = "1.0"\n\n[metadata.twin]\nsource_mount = "/source"\nassets_dir = ""\n\n' + toml_table(original)
    )
    return root


def test_materialize_lays_out_exactly_the_declared_files_then_needs_no_index(local_index, tmp_path, monkeypatch):
    wheel = build_wheel(local_index, FILES)
    original = declaration(wheel)
    laid_out = materialize(original)
    assert laid_out == original_dir(original)
    files = sorted(str(p.relative_to(laid_out)) for p in laid_out.rglob("*") if p.is_file())
    assert files == ["fakeorig/__init__.py", "fakeorig/model.py", "fakeorig/sub/helpers.py"]
    assert (laid_out / "fakeorig" / "model.py").read_text() == FILES["fakeorig/model.py"]
    other = declaration(wheel, files=["fakeorig/model.py"])
    wheel.unlink()  # the registry is gone: the laid-out copy serves, and so does the kept wheel
    assert materialize(original) == laid_out
    assert materialize(other).joinpath("fakeorig", "model.py").is_file()  # another selection, from the kept wheel


def test_no_index_and_no_cache_is_one_clear_line(local_index, tmp_path):
    wheel = build_wheel(tmp_path / "not-served", FILES)
    with pytest.raises(DistributionError) as caught:
        materialize(declaration(wheel))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("cannot download fakeorig==1.0 from the package index (")
    assert "no copy is cached" in message
    assert not (tmp_path / "cache" / "originals").exists()


def test_a_wrong_hash_is_refused_and_nothing_is_cached(local_index):
    wheel = build_wheel(local_index, FILES)
    original = declaration(wheel, sha256="0" * 64)
    with pytest.raises(DistributionError) as caught:
        materialize(original)
    message = str(caught.value)
    assert "\n" not in message and "not the declared " + "0" * 64 in message and "nothing cached" in message
    cache = distribution.cache_root()
    assert not original_dir(original).exists()
    assert not (cache / "distributions" / ("0" * 64)).exists()
    assert [p.name for p in (cache / "distributions").iterdir()] == []  # no download left behind


def test_a_declared_file_the_wheel_lacks_is_refused(local_index):
    original = declaration(build_wheel(local_index, FILES), files=["fakeorig/missing.py"])
    with pytest.raises(DistributionError, match="has no file 'fakeorig/missing.py'"):
        materialize(original)
    assert not original_dir(original).exists()


def test_an_interrupted_lay_out_leaves_nothing_half_written(local_index, monkeypatch):
    original = declaration(build_wheel(local_index, FILES))
    reads = []

    def interrupted(self, name, *args, **kwargs):
        reads.append(name)
        if len(reads) == 2:
            raise KeyboardInterrupt
        return real_open(self, name, *args, **kwargs)

    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        materialize(original)
    target = original_dir(original)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no staging directory or manifest left either
    monkeypatch.setattr(zipfile.ZipFile, "open", real_open)
    assert materialize(original).joinpath("fakeorig", "sub", "helpers.py").is_file()


def test_a_task_sees_its_declared_original_as_its_source(local_index, tmp_path):
    original = declaration(build_wheel(local_index, FILES))
    task = load_task(own_task(tmp_path / "task", original))
    assert task.source_dir == original_dir(original)
    assert not (tmp_path / "task" / "environment").exists()  # nothing is written into the task
    workspace = prepare_workspace(task, tmp_path / "ws")
    assert (workspace.source / "fakeorig" / "model.py").read_text() == FILES["fakeorig/model.py"]
    assert not (workspace.source / "fakeorig" / "unused.py").exists()


def test_a_task_with_both_an_original_and_a_source_dir_is_refused(local_index, tmp_path):
    original = declaration(build_wheel(local_index, FILES))
    root = own_task(tmp_path / "task", original)
    text = (root / "task.toml").read_text().replace("[metadata.twin]\n", '[metadata.twin]\nsource_dir = "src"\n')
    (root / "task.toml").write_text(text)
    with pytest.raises(Exception, match="declares an original and a source_dir"):
        load_task(root)


def test_a_malformed_declaration_is_one_line(local_index, tmp_path):
    original = declaration(build_wheel(local_index, FILES))
    root = own_task(tmp_path / "task", original)
    text = (root / "task.toml").read_text().replace(original.sha256, "not-a-hash")
    (root / "task.toml").write_text(text)
    with pytest.raises(Exception, match=r"bad \[metadata.twin\] original.sha256 .*64 lower-case hex digits"):
        load_task(root)


def test_twin_task_fetch_fetches_once_then_works_offline(local_index, tmp_path, capsys):
    wheel = build_wheel(local_index, FILES)
    root = own_task(tmp_path / "task", declaration(wheel))
    assert main(["task", "fetch", str(root), "--no-deps"]) == 0
    assert "fakeorig==1.0 (Apache-2.0): 3 files laid out in" in capsys.readouterr().out
    wheel.unlink()
    assert main(["task", "fetch", str(root), "--no-deps"]) == 0


def test_twin_task_fetch_fails_with_one_line(local_index, tmp_path, capsys):
    root = own_task(tmp_path / "task", declaration(build_wheel(local_index, FILES), sha256="1" * 64))
    assert main(["task", "fetch", str(root), "--no-deps"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not the declared " + "1" * 64 in err
    bare = tmp_path / "bare"
    own_task(bare, declaration(build_wheel(local_index, FILES)))
    (bare / "task.toml").write_text('version = "1.0"\n\n[metadata.twin]\nsource_dir = "environment/source"\n')
    (bare / "environment" / "source").mkdir(parents=True)
    assert main(["task", "fetch", str(bare)]) == 2
    assert "declares no original" in capsys.readouterr().err


REQUIRES = (
    "numpy>=1.0",
    'pyyaml>=5; python_version >= "3.0"',
    'never-on-this-python>=1; python_version < "3.0"',
    'pytest>=8; extra == "test"',
    "not-installed-anywhere>=1.0",
)


def test_runtime_requirements_evaluate_markers_and_leave_extras_out(local_index):
    from task_model.distribution_install import missing_requirements, runtime_requirements

    wanted = runtime_requirements(build_wheel(local_index, FILES, requires=REQUIRES))
    assert [w.split(";")[0].replace(" ", "") for w in wanted] == [
        "numpy>=1.0",
        "pyyaml>=5",
        "not-installed-anywhere>=1.0",
    ]
    assert missing_requirements(wanted) == ["not-installed-anywhere>=1.0"]
    assert missing_requirements(["numpy<1.0"]) == ["numpy<1.0"]  # installed, but outside the range


def test_a_pip_install_run_is_accepted_only_where_every_package_is_installed(tmp_path):
    from task_model.dockerfile import RunRefused, read_dockerfile

    dockerfile = tmp_path / "Dockerfile"
    for requirements, accepted in (("'numpy>=1.0' 'pyyaml>=5'", True), ("'not-installed-anywhere>=1'", False)):
        run = f"echo torch==2.13.0 > /tmp/held.txt && pip install --no-cache-dir -c /tmp/held.txt {requirements}"
        dockerfile.write_text(f"FROM python:3.11-slim\nRUN {run}\n")
        if accepted:
            assert any("already in twin's environment" in n for n in read_dockerfile(dockerfile).notes)
        else:
            with pytest.raises(RunRefused, match="not-installed-anywhere is not installed"):
                read_dockerfile(dockerfile)
