"""`twin task new --checkpoint-from FILE.pth`: a pickled state_dict given to the port as safetensors."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from benchmark_adapter.grading.authoring import new_task
from benchmark_adapter.grading.checkpoint import checkpoint_note, convert_checkpoint
from task_model.model import TaskError

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tasks" / "published" / "tiny-net"


def _torch():
    return pytest.importorskip("torch")  # imported only by the tests that convert (heavy)


class Payload:
    """What a hostile pickle would run on load: weights-only loading must refuse it."""

    def __reduce__(self):
        return (print, ("unpickled",))


@pytest.mark.heavy  # each conversion starts torch in a child process (5 s or more)
@pytest.mark.parametrize("nested", [None, "state_dict", "model"])
def test_a_state_dict_becomes_safetensors_with_the_same_tensors(tmp_path, nested):
    torch = pytest.importorskip("torch")
    weights = {"fc.weight": torch.arange(6.0).reshape(2, 3), "fc.bias": torch.ones(2)}
    weights["tied"] = weights["fc.bias"]  # shared storage, which safetensors refuses unless copied
    saved = {nested: weights, "epoch": 3} if nested else weights
    torch.save(saved, tmp_path / "model.pth")
    assert convert_checkpoint(tmp_path / "model.pth", tmp_path / "model.safetensors") == 3
    loaded = load_file(tmp_path / "model.safetensors")
    assert sorted(loaded) == ["fc.bias", "fc.weight", "tied"]
    np.testing.assert_array_equal(loaded["fc.weight"], np.arange(6.0, dtype=np.float32).reshape(2, 3))


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (lambda p: p.write_bytes(pickle.dumps({"w": Payload()})), "cannot convert it to safetensors"),
        (lambda p: _torch().save({"lr": 0.1, "steps": [1, 2]}, p), "holds no state_dict"),
        (lambda p: p.write_bytes(b"not a pickle"), "cannot convert it to safetensors"),
    ],
)
def test_anything_but_a_state_dict_is_refused_in_one_line(tmp_path, capfd, content, message):
    content(tmp_path / "bad.pth")
    with pytest.raises(TaskError, match=message) as caught:
        convert_checkpoint(tmp_path / "bad.pth", tmp_path / "out.safetensors")
    assert "\n" not in str(caught.value) and not (tmp_path / "out.safetensors").exists()
    assert "unpickled" not in capfd.readouterr().out


def test_what_to_do_without_a_readable_checkpoint(tmp_path):
    assert "--checkpoint-from FILE.pth" in checkpoint_note(None, converted=False)
    (tmp_path / "model.pth").write_bytes(b"")
    assert "only pickled checkpoints (model.pth)" in checkpoint_note(tmp_path, converted=False)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert checkpoint_note(tmp_path, converted=False) is None
    assert checkpoint_note(None, converted=True) is None


def test_a_bad_checkpoint_from_writes_nothing(tmp_path):
    (tmp_path / "weights.npz").write_bytes(b"")
    with pytest.raises(TaskError, match="needs a pickled checkpoint file"):
        new_task(tmp_path / "task", source=TINY / "environment" / "torch_orig", interface=["net:apply"],
                 probes=[TINY / "tests" / "probes" / "tiny_net.py"],
                 checkpoint_from=tmp_path / "weights.npz")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.npz"]


@pytest.mark.heavy
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="recording references needs bwrap")
def test_a_task_made_from_a_pth_gets_safetensors_only(tmp_path):
    torch = pytest.importorskip("torch")
    weights = load_file(TINY / "environment" / "checkpoint" / "model.safetensors")
    state = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    torch.save({"state_dict": state}, tmp_path / "model.pth")
    report = new_task(tmp_path / "task", source=TINY / "environment" / "torch_orig", interface=["net:apply"],
                      probes=[TINY / "tests" / "probes" / "tiny_net.py"],
                      checkpoint_from=tmp_path / "model.pth")  # fmt: skip
    assert report.probes
    shipped = sorted(p.name for p in (tmp_path / "task" / "environment" / "checkpoint").iterdir())
    assert shipped == ["model.safetensors"]
