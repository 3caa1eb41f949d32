"""A declared original's reference environment: apart from twin's interpreter, from index wheels only, hashed.

Every wheel is built here and served from a local index (`tests/fakes/wheels.py`); pip runs
for real, for the environment's own interpreter, so these tests take a few seconds each.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from task_model import reference_env
from task_model.distribution import DistributionError, keep_wheel
from task_model.reference_env import build, built, env_dir, held_torch, reference_site
from tests.benchmark_adapter.test_distribution import FILES, declaration
from tests.fakes.wheels import build_wheel

TWIN_SITE = Path(sysconfig.get_paths()["purelib"])


def _declared(index: Path, **wheel_options):
    """The declaration of a wheel built into `index`, the wheel kept in twin's cache (no pip download)."""
    wheel = build_wheel(index, FILES, **wheel_options)
    original = declaration(wheel, version=wheel_options.get("version", "1.0"))
    kept = index / "kept" / wheel.name
    kept.parent.mkdir(exist_ok=True)
    kept.write_bytes(wheel.read_bytes())
    keep_wheel(original, kept)
    return original


def _twin_imports(module: str) -> bool:
    """Whether a fresh process of twin's interpreter can import `module`."""
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=120)
    return probe.returncode == 0


def test_a_direct_reference_is_refused_before_anything_is_made(local_index):
    for requirement in ("evil @ file:///tmp/evil-1.0-py3-none-any.whl", "evil @ https://example.org/evil.whl"):
        original = _declared(local_index, requires=(requirement,))
        with pytest.raises(DistributionError) as caught:
            build(original)
        message = str(caught.value)
        assert "\n" not in message and "requires evil from a URL" in message and "refused" in message
        assert not env_dir(original).parent.exists() or not list(env_dir(original).parent.iterdir())


@pytest.mark.heavy  # pip resolves and installs for real (about ten seconds on two loaded cores)
def test_the_environment_holds_what_twin_lacks_and_nothing_of_it_runs_in_twin(local_index, tmp_path):
    dep = build_wheel(
        local_index,
        {"tinydep/__init__.py": "VALUE = 7\n", "zz_tinydep.pth": "tinydep_extra\n", "tinydep_extra/tinyx.py": ""},
        name="tinydep",
        version="1.0",
    )
    original = _declared(local_index, requires=("numpy>=1.0", "tinydep>=1.0"))
    before = sorted(os.listdir(TWIN_SITE))
    env = build(original)
    assert [(e.name, e.version) for e in env.lock] == [("tinydep", "1.0")]  # numpy: twin's own serves
    assert env.lock[0].sha256 == hashlib.sha256(dep.read_bytes()).hexdigest()
    assert (env.site / "tinydep" / "__init__.py").is_file()
    assert not list(env.site.glob("torch*")) and not list(env.site.glob("numpy*"))
    assert sorted(os.listdir(TWIN_SITE)) == before  # nothing of the task's in twin's site-packages
    assert not _twin_imports("tinydep") and not _twin_imports("tinyx")  # nor its .pth's folder
    assert json.loads((env.root / "lock.json").read_text())[0]["name"] == "tinydep"
    assert reference_site(original) == env.site and built(original) == env
    probe = subprocess.run(
        [sys.executable, "-c", "import tinydep, numpy; print(tinydep.VALUE)"],
        env={**os.environ, "PYTHONPATH": str(env.site)},
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "7"  # what the reference side sees


@pytest.mark.heavy  # pip installs for real
@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({"torch.py": "FAKE = True\n"}, "installs a top-level torch.py, which imports as torch"),
        ({"torch/__init__.py": "FAKE = True\n"}, "installs a top-level torch, which imports as torch"),
        ({"zz_tinydep.pth": "import os; open({marker!r}, 'w')\n"}, 'installs zz_tinydep.pth: its line "import os;'),
        (
            {"zz_tinydep.pth": "shadow\n", "shadow/torch/__init__.py": ""},
            "installs zz_tinydep.pth: its line 'shadow' puts torch on the path",
        ),
    ],
)
def test_a_dependency_that_ships_torch_under_any_name_is_refused(local_index, tmp_path, files, why):
    marker = tmp_path / "pth-ran"
    files = {path: text.format(marker=str(marker)) for path, text in files.items()}
    build_wheel(local_index, {"tinydep/__init__.py": "", **files}, name="tinydep", version="1.0")
    original = _declared(local_index, requires=("tinydep>=1.0",))
    before = sorted(os.listdir(TWIN_SITE))
    with pytest.raises(DistributionError) as caught:
        build(original)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(": refused"), message
    assert f"of fakeorig==1.0: distribution tinydep {why}" in message, message
    assert built(original) is None and not env_dir(original).exists()  # nothing kept
    assert [p.name for p in env_dir(original).parent.iterdir()] == []
    assert sorted(os.listdir(TWIN_SITE)) == before and not marker.exists()  # the .pth ran nowhere


def test_a_built_environment_is_checked_again_before_use(local_index):
    original = _declared(local_index)  # no requirements: an environment with twin's own .pth only
    env = build(original)
    assert built(original) == env
    (env.site / "torch.py").write_text("FAKE = True\n")  # as an environment built before the check holds it
    with pytest.raises(DistributionError, match=r"a top-level torch.py, which imports as torch: refused$"):
        built(original)
    with pytest.raises(DistributionError, match="imports as torch"):
        reference_site(original)


def test_an_original_that_needs_an_unbuilt_environment_says_how_to_build_it(local_index):
    build_wheel(local_index, {"tinydep/__init__.py": ""}, name="tinydep", version="1.0")
    original = _declared(local_index, requires=("tinydep>=1.0",))
    with pytest.raises(DistributionError, match=r"not built for the torch held here: run `twin task fetch TASK`"):
        reference_site(original)
    assert reference_site(_declared(local_index, version="1.1", requires=("numpy>=1.0",))) is None
    assert reference_site(_declared(local_index, version="1.2").model_copy(update={"dependencies": False})) is None


@pytest.mark.heavy  # pip resolves for real, twice
def test_a_companion_must_be_a_build_of_the_held_torch(local_index):
    version, _record = held_torch()
    public, _, local = version.partition("+")
    if not local:
        pytest.skip("the held torch has no local label (its companions' plain builds match it)")
    companion = {"torchvision/__init__.py": "import torch\n"}
    build_wheel(local_index, companion, name="torchvision", version="0.28.0", requires=(f"torch=={public}",))
    original = _declared(local_index, requires=("torchvision",))
    with pytest.raises(DistributionError) as caught:
        build(original)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"torchvision: the index serves no torchvision 0.28.0+{local} built for the torch")
    assert f"put the torchvision==0.28.0+{local} wheel where pip finds it" in message
    assert built(original) is None
    build_wheel(local_index, companion, name="torchvision", version=f"0.28.0+{local}", requires=(f"torch=={public}",))
    env = build(original)
    assert [(e.name, e.version) for e in env.lock] == [("torchvision", f"0.28.0+{local}")]


def test_torchs_files_are_checked_against_its_record(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("real\n")
    digest = hashlib.sha256(b"real\n").digest()
    import base64

    encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    record = site / "torch-2.13.0.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text(f"torch/__init__.py,sha256={encoded},5\ntorch-2.13.0.dist-info/RECORD,,\n")
    reference_env._check_torch(record, "after")
    (site / "torch" / "__init__.py").write_text("evil\n")  # the same size, other bytes
    with pytest.raises(DistributionError, match="torch's file torch/__init__.py differs from its RECORD after"):
        reference_env._check_torch(record, "after")
    (site / "torch" / "__init__.py").unlink()
    with pytest.raises(DistributionError, match="torch/__init__.py is missing after"):
        reference_env._check_torch(record, "after")


def test_the_key_is_json_of_the_declaration_and_the_held_torch(local_index, monkeypatch):
    original = declaration(build_wheel(local_index, FILES))
    key = reference_env.env_key(original)
    assert key["torch"]["version"] == held_torch()[0] and key["original"]["sha256"] == original.sha256
    first = env_dir(original)
    monkeypatch.setattr(reference_env, "held_torch", lambda: ("9.9.9+cpu", held_torch()[1]))
    assert env_dir(original) != first  # another torch build, another environment


def test_a_lock_entry_is_a_plain_name_a_normalized_version_and_a_sha256():
    from pydantic import ValidationError

    from task_model.reference_lock import Locked

    assert Locked(name="torchvision", version="0.28.0+cpu", sha256="a" * 64).line() == (
        "torchvision==0.28.0+cpu --hash=sha256:" + "a" * 64
    )
    for bad in (
        {"name": "tinydep\n--index-url http://evil.example", "version": "1.0"},
        {"name": "tinydep", "version": "1.0 --pre"},
        {"name": "tinydep", "version": "1.0", "sha256": "not-hex"},
    ):
        with pytest.raises(ValidationError):
            Locked(**{"sha256": "b" * 64, **bad})


def test_without_torch_no_environment_is_built_and_none_is_looked_for(local_index, monkeypatch):
    original = _declared(local_index, requires=("numpy>=1.0",))

    def no_torch():
        raise DistributionError("torch is not installed in /x: install the pinned CPU build first (scripts/setup.sh)")

    monkeypatch.setattr(reference_env, "held_torch", no_torch)
    assert built(original) is None and reference_site(original) is None  # twin's own numpy serves
    with pytest.raises(DistributionError, match="torch is not installed"):
        build(original)
