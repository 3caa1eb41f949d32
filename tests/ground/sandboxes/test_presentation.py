"""Neutral mount sources: roots are bound from slots, moved back after each command, recovered after a kill."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ground.agent_tree import discard_tree
from ground.boundary import Boundary, Mount
from ground.sandboxes import presentation
from ground.sandboxes.presentation import Presenter, recover_slots


@pytest.fixture
def stage(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "stage"
    monkeypatch.setenv("TWIN_STAGE_DIR", str(root))
    return root


def tree(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "runs" / "r1"
    (run / "candidate" / "pkg").mkdir(parents=True)
    (run / "candidate" / "pkg" / "model.py").write_text("W = 1\n")
    (run / "source" / "hidden").mkdir(parents=True)
    (run / "source" / "hidden" / "answer.txt").write_text("secret\n")
    (run / "source" / "model.py").write_text("import torch\n")
    return run / "candidate", run / "source"


def test_a_writable_root_is_in_its_slot_only_while_commands_run(tmp_path, stage):
    candidate, source = tree(tmp_path)
    presenter = Presenter(Boundary(name="m", mounts=[Mount(host=candidate, inside="/app", writable=True)]))
    slot = presenter.boundary().mounts[0].host
    assert stage in slot.parents and str(tmp_path / "runs") not in str(slot)
    presenter.enter()
    presenter.enter()  # a second command of the same sandbox
    assert candidate.is_symlink() and (slot / "pkg" / "model.py").read_text() == "W = 1\n"
    (candidate / "pkg" / "new.py").write_text("x\n")  # the host's paths keep working meanwhile
    presenter.leave()
    assert candidate.is_symlink()  # the other command still runs
    presenter.leave()
    assert not candidate.is_symlink() and (candidate / "pkg" / "new.py").read_text() == "x\n"
    presenter.close()
    assert candidate.is_dir() and not list(stage.iterdir())


def test_a_read_only_root_is_a_snapshot_without_hidden_paths_kept_up_to_date(tmp_path, stage):
    _candidate, source = tree(tmp_path)
    boundary = Boundary(name="d", mounts=[Mount(host=source, inside="/source")], hidden=[source / "hidden"])
    presenter = Presenter(boundary)
    slot = presenter.boundary().mounts[0].host
    assert presenter.boundary().hidden == []  # left out of the snapshot, nothing to cover
    presenter.enter()
    assert (slot / "model.py").read_text() == "import torch\n" and not (slot / "hidden").exists()
    assert os.stat(slot / "model.py").st_ino == os.stat(source / "model.py").st_ino  # a link, not a copy
    presenter.leave()
    (source / "extra.py").write_text("y\n")
    presenter.enter()
    assert (slot / "extra.py").read_text() == "y\n"
    presenter.leave()
    assert sorted(p.name for p in slot.parent.iterdir()) == ["0", "owner"]  # the snapshots are gone
    assert os.stat(source / "model.py").st_nlink == 1  # no link outlives the command
    presenter.close()
    assert (source / "hidden" / "answer.txt").exists() and (source / "model.py").exists()


def test_roots_that_cannot_be_presented_are_bound_as_they_are(tmp_path, stage):
    import tempfile

    stage.mkdir(parents=True)
    other_fs = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.path.isdir("/dev/shm") else None
    if other_fs is None or os.stat(other_fs).st_dev == os.stat(stage).st_dev:
        pytest.skip("no second filesystem here")
    try:
        mounts = [
            Mount(host=other_fs, inside="/app", writable=True),  # a rename cannot cross filesystems
            Mount(host=Path(sys.prefix).resolve(), inside=str(Path(sys.prefix).resolve())),  # at its own path
        ]
        presenter = Presenter(Boundary(name="m", mounts=mounts))
        assert [m.host for m in presenter.boundary().mounts] == [m.host for m in mounts]
        presenter.enter()
        assert other_fs.is_dir() and not other_fs.is_symlink()
        presenter.leave()
        presenter.close()
    finally:
        os.rmdir(other_fs)


def test_a_killed_harness_leaves_nothing_lost_the_next_sandbox_moves_the_root_back(tmp_path, stage):
    candidate, _source = tree(tmp_path)
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from ground.boundary import Boundary, Mount
        from ground.sandboxes.presentation import Presenter
        p = Presenter(Boundary(name="m", mounts=[Mount(host=Path({str(candidate)!r}), inside="/app", writable=True)]))
        p.enter()
        os._exit(0)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    assert candidate.is_symlink() and (candidate / "pkg" / "model.py").exists()  # reachable meanwhile
    assert recover_slots(stage) == [candidate]
    assert not candidate.is_symlink() and (candidate / "pkg" / "model.py").read_text() == "W = 1\n"
    assert not list(stage.iterdir())


def test_a_boundary_built_over_a_dead_slot_is_refused_and_the_root_moved_back(tmp_path, stage):
    from ground.sandbox import SandboxError

    candidate, _source = tree(tmp_path)
    killed = Presenter(Boundary(name="m", mounts=[Mount(host=candidate, inside="/app", writable=True)]))
    killed.enter()
    (killed._dir / "owner").write_text("1 0")  # as if its process were gone
    resolved = Boundary(name="d", mounts=[Mount(host=candidate, inside="/app")])
    assert stage in resolved.mounts[0].host.parents  # the boundary resolved into the slot
    with pytest.raises(SandboxError, match="killed process"):
        Presenter(resolved)
    assert not candidate.is_symlink() and (candidate / "pkg" / "model.py").exists()


def test_slots_of_a_live_process_are_left_alone(tmp_path, stage):
    candidate, _source = tree(tmp_path)
    presenter = Presenter(Boundary(name="m", mounts=[Mount(host=candidate, inside="/app", writable=True)]))
    presenter.enter()
    assert recover_slots(stage) == [] and candidate.is_symlink()
    presenter.leave()
    presenter.close()


def test_a_deep_chain_in_a_read_only_root_is_snapshotted_and_settled_without_a_crash(tmp_path, stage):
    from tests.fakes.trees import deep_chain

    candidate, _source = tree(tmp_path)
    deep_chain(candidate, 1200, name="d")  # deeper than the interpreter's recursion limit
    presenter = Presenter(Boundary(name="v", mounts=[Mount(host=candidate, inside="/app")]))
    presenter.enter()
    presenter.leave()  # the snapshot of the chain is removed here
    presenter.close()
    assert not list(stage.iterdir()) and (candidate / "pkg" / "model.py").exists()


def test_a_dead_slot_holding_a_deep_chain_is_removed_without_a_crash(tmp_path, stage):
    from tests.fakes.trees import deep_chain

    folder = stage / "pdead"
    (folder / "0.done").mkdir(parents=True)
    (folder / "owner").write_text("1 0")  # its process is gone
    deep_chain(folder / "0.done", 1200, name="d")
    assert recover_slots(stage) == []
    assert not folder.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's slot needs root to lay out")
@pytest.mark.parametrize("foreign", ["folder", "origin record", "owner record"])
def test_a_slot_another_user_could_have_made_is_never_acted_on(tmp_path, stage, foreign):
    """A dead-looking slot whose folder or records are not root's alone moves nothing anywhere."""
    folder = stage / "pplanted"
    (folder / "0").mkdir(parents=True)
    (folder / "0" / "payload").write_text("planted\n")
    (folder / "owner").write_text("1 0")  # its process is gone
    target = tmp_path / "victim" / "cron.d"
    target.parent.mkdir()
    (folder / "0.origin").write_text(str(target))
    chowned = {"folder": folder, "origin record": folder / "0.origin", "owner record": folder / "owner"}[foreign]
    os.chown(chowned, 65534, 65534)
    assert recover_slots(stage) == []
    assert not target.exists() and (folder / "0" / "payload").exists()


SWEEPER = """
import sys
from pathlib import Path
from ground.sandboxes.presentation import recover_slots
base, stop = Path(sys.argv[1]), Path(sys.argv[2])
while not stop.exists():
    recover_slots(base)
"""


@pytest.mark.heavy  # a race: seconds of three processes sweeping while slots are made
def test_a_slot_being_made_is_never_taken_for_a_dead_one_by_another_twin(tmp_path, stage):
    stage.mkdir(parents=True)
    command = [sys.executable, "-c", SWEEPER, str(stage), str(tmp_path / "stop")]
    sweepers = [subprocess.Popen(command, cwd=Path(__file__).parents[3]) for _ in range(3)]
    try:
        time.sleep(0.5)  # the sweepers have started
        lost = 0
        for _ in range(1500):
            try:  # the other processes sweep dead slots meanwhile
                slot = presentation._slot_dir()
                (slot / "0").mkdir()
            except FileNotFoundError:
                lost += 1
                continue
            discard_tree(slot)
    finally:
        (tmp_path / "stop").touch()
        for sweeper in sweepers:
            sweeper.wait(timeout=30)
    assert lost == 0  # before the owner file was written whole, 1 to 3 slots in 1500 were lost
