"""A task's checkpoint as the port can read it: a pickled PyTorch state_dict converted to safetensors.

A `.pth`/`.pt` file is a pickle: reading it without torch means unpickling, which a port
must never do (and cannot do faithfully). `twin task new --checkpoint-from FILE.pth`
converts it once, on the reference side (torch present, `torch.load(weights_only=True)`,
which refuses anything but tensors and plain containers), in a child process so that
twin itself never imports torch, and gives the task the `.safetensors` file instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from task_model.model import TaskError

PICKLED_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
"""Checkpoint files that are pickles (torch.save)."""
CONVERT_TIMEOUT_S = 600.0

_CONVERT = r"""
import sys
import torch
from safetensors.torch import save_file

obj = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
if isinstance(obj, dict):
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(obj.get(key), dict):
            obj = obj[key]
            break
if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
    sys.exit("holds no state_dict (a dict of tensor names to tensors, or one under 'state_dict' or 'model')")
save_file({str(k): v.detach().clone().contiguous() for k, v in obj.items()}, sys.argv[2])
print(len(obj))
"""


def convert_checkpoint(pickled: Path, dest: Path) -> int:
    """Write the state_dict of `pickled` to `dest` (safetensors); returns how many tensors it holds.

    Raises:
        TaskError: torch cannot load it as weights only, or it holds no state_dict (one line).
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CONVERT, str(pickled), str(dest)],
            capture_output=True,
            text=True,
            timeout=CONVERT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise TaskError(f"--checkpoint-from {pickled}: converting took over {CONVERT_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0 or not dest.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TaskError(f"--checkpoint-from {pickled}: cannot convert it to safetensors: {last}")
    return int(proc.stdout.strip() or 0)


def checkpoint_note(assets: Path | None, converted: bool) -> str | None:
    """What to do about a task without a checkpoint the port can read (None: nothing to say)."""
    if converted:
        return None
    if assets is None:
        return (
            "no checkpoint given: probes check the port on weights they build themselves; to give the "
            "original's trained weights, pass --assets DIR (safetensors) or --checkpoint-from FILE.pth"
        )
    pickled = sorted(p.name for p in Path(assets).rglob("*") if p.suffix in PICKLED_SUFFIXES)
    if pickled and not any(Path(assets).rglob("*.safetensors")):
        return (
            f"the assets hold only pickled checkpoints ({', '.join(pickled[:3])}), which a port can read only "
            "by unpickling them: pass --checkpoint-from FILE to give the task a safetensors copy"
        )
    return None
