"""The part every sandbox shares: file operations through the boundary, a close that always lets go."""

from __future__ import annotations

import pytest

from ground.boundary import Boundary, BoundaryViolation, Mount
from ground.sandbox import SandboxError
from ground.sandboxes import base
from ground.sandboxes.base import BoundarySandbox, PresentedRoots
from ground.sandboxes.none import UnsandboxedProcess


def boundary(tmp_path, **kwargs) -> Boundary:
    (tmp_path / "app").mkdir(exist_ok=True)
    (tmp_path / "ref").mkdir(exist_ok=True)
    fields = dict(
        name="test",
        mounts=[
            Mount(host=tmp_path / "app", inside="/app", writable=True),
            Mount(host=tmp_path / "ref", inside="/ref"),
        ],
        workdir="/app",
    )
    fields.update(kwargs)
    return Boundary(**fields)


class _Roots:
    """Stands in for `PresentedRoots`: records its release."""

    def __init__(self, log: list) -> None:
        self.log = log

    def release(self) -> None:
        self.log.append("roots released")


class _Failing(BoundarySandbox):
    def __init__(self, b: Boundary, log: list) -> None:
        super().__init__(b, _Roots(log))  # type: ignore[arg-type]
        self.log = log

    def _release(self) -> None:
        self.log.append("own release")
        raise OSError("staging point busy")


def test_close_releases_the_roots_when_the_kinds_own_release_fails_and_only_once(tmp_path):
    log: list[str] = []
    sandbox = _Failing(boundary(tmp_path), log)
    with pytest.raises(OSError, match="staging point busy"):
        sandbox.close()
    assert log == ["own release", "roots released"]
    sandbox.close()
    assert log == ["own release", "roots released"]


def test_a_closed_sandbox_runs_nothing(tmp_path):
    with UnsandboxedProcess(boundary(tmp_path)) as sandbox:
        assert sandbox.exec(["true"]).ok
    with pytest.raises(SandboxError, match="sandbox test is closed"):
        sandbox.exec(["true"])


def test_files_go_through_the_boundarys_checks(tmp_path):
    sandbox = UnsandboxedProcess(boundary(tmp_path, hidden=[tmp_path / "ref" / "secret.txt"]))
    (tmp_path / "ref" / "given.txt").write_text("reference")
    (tmp_path / "ref" / "secret.txt").write_text("hidden")
    sandbox.write_file("/app/sub/out.txt", "written")
    assert (tmp_path / "app" / "sub" / "out.txt").read_text() == "written"
    assert sandbox.read_file("/ref/given.txt") == b"reference"
    with pytest.raises(BoundaryViolation):
        sandbox.write_file("/ref/given.txt", "over the reference")
    with pytest.raises(BoundaryViolation):
        sandbox.read_file("/ref/secret.txt")
    assert (tmp_path / "ref" / "given.txt").read_text() == "reference"


def test_presented_roots_release_the_capped_roots_when_presenting_fails(tmp_path, monkeypatch):
    log: list = []
    monkeypatch.setattr(base, "cap_writable_roots", lambda b: ["capped"])
    monkeypatch.setattr(base, "release_all", lambda roots: log.append(("released", roots)))

    def refuse(b):
        raise SandboxError("no slot")

    monkeypatch.setattr(base, "Presenter", refuse)
    with pytest.raises(SandboxError, match="no slot"):
        PresentedRoots(boundary(tmp_path))
    assert log == [("released", ["capped"])]


def test_presented_roots_unmount_the_capped_roots_when_moving_back_fails(tmp_path, monkeypatch):
    log: list = []
    monkeypatch.setattr(base, "cap_writable_roots", lambda b: ["capped"])
    monkeypatch.setattr(base, "release_all", lambda roots: log.append(("released", roots)))

    class Stuck:
        def __init__(self, b) -> None:
            pass

        def close(self) -> None:
            raise OSError("cannot move back")

    monkeypatch.setattr(base, "Presenter", Stuck)
    roots = PresentedRoots(boundary(tmp_path))
    with pytest.raises(OSError, match="cannot move back"):
        roots.release()
    assert log == [("released", ["capped"])]


def test_a_write_opens_nothing_planted_beside_its_file(tmp_path):
    """A FIFO or a link at any temporary name the write could use is never opened (it would block or leak)."""
    import os
    import threading

    sandbox = UnsandboxedProcess(boundary(tmp_path))
    app = tmp_path / "app"
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    os.mkfifo(app / f".model.py.twin-tmp-{os.getpid()}")
    (app / ".model.py.tmp").symlink_to(victim)
    done = threading.Thread(target=sandbox.write_file, args=("/app/model.py", "x = 1\n"), daemon=True)
    done.start()
    done.join(timeout=10)
    assert not done.is_alive(), "the write blocked on a planted FIFO"
    assert (app / "model.py").read_text() == "x = 1\n" and victim.read_text() == "victim"


def test_a_sandbox_says_which_capped_root_was_unmounted_under_it(tmp_path, monkeypatch):
    """What a command wrote to a root unmounted meanwhile is not where twin reads: the sandbox says so."""
    import os
    import subprocess

    from ground.sandboxes.quota import EXT4, unavailable

    if unavailable(EXT4) is not None:
        pytest.skip(f"cannot mount a capped filesystem here: {unavailable(EXT4)}")
    stage = tmp_path / "stage"
    stage.mkdir(mode=0o711)
    os.chmod(stage, 0o711)
    monkeypatch.setenv("TWIN_STAGE_DIR", str(stage))  # its records apart from any other twin's

    class NoSlots:
        def __init__(self, b) -> None:
            pass

        def close(self) -> None:
            pass

    monkeypatch.setattr(base, "Presenter", NoSlots)
    (tmp_path / "roots").mkdir()
    b = boundary(tmp_path / "roots")
    sandbox = BoundarySandbox(b, PresentedRoots(b))
    app = tmp_path / "roots" / "app"
    assert os.path.ismount(app) and sandbox.lost_roots() == []
    subprocess.run(["umount", "-l", str(app)], check=True)
    (lost,) = sandbox.lost_roots()
    assert lost == f"the capped filesystem of {app} was unmounted while in use (what was written there is lost)"
    sandbox.close()
    assert not os.path.ismount(app) and app.is_dir()
    assert UnsandboxedProcess(boundary(tmp_path / "roots")).lost_roots() == []
