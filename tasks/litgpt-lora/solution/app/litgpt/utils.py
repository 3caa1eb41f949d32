"""Loss and checkpoint reading, without torch.

`load_checkpoint` reads litgpt's checkpoint format (`torch.save` of a state dict: a zip holding
`data.pkl` and one raw storage file per tensor) with the standard library and numpy: the pickle
is read by an unpickler that knows only the few torch names a state dict uses and refuses every
other global.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
    "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}  # fmt: skip


class _Storage:
    def __init__(self, name: str) -> None:
        self.dtype = STORAGE_DTYPES[name]


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None) -> np.ndarray:
    itemsize = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * itemsize for s in stride)
    )
    return np.array(view)


class _StateDictUnpickler(pickle.Unpickler):
    def __init__(self, stream, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(stream)
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _Storage(name)
        raise pickle.UnpicklingError(f"a state dict does not hold {module}.{name}")

    def persistent_load(self, pid):
        kind, storage, key, _location, _numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        return np.frombuffer(self.archive.read(f"{self.prefix}/data/{key}"), dtype=storage.dtype)


def load_checkpoint(path: str | Path) -> dict[str, np.ndarray]:
    """litgpt's `lit_model.pth` (a state dict saved with `torch.save`) as numpy arrays by name."""
    with zipfile.ZipFile(path) as archive:
        pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        prefix = pickled[: -len("/data.pkl")]
        with archive.open(pickled) as stream:
            state = _StateDictUnpickler(stream, archive, prefix).load()
    return {str(k): v for k, v in state.items()}


def chunked_cross_entropy(
    logits: jax.Array | list[jax.Array], targets: jax.Array, chunk_size: int = 128, ignore_index: int = -100
) -> jax.Array:
    """Mean cross-entropy over the targets that are not `ignore_index`.

    Args:
        logits: `[B, T, V]`, or a list of chunks along T (as a chunked lm_head returns).
        targets: `[B, T]`.
        chunk_size: 0 reproduces torch's plain mean (NaN when every target is ignored); any
            other size divides by at least one, as litgpt's chunked form does.
    """
    if isinstance(logits, (list, tuple)):
        logits = jnp.concatenate(logits, axis=1)
    logits = logits.reshape(-1, logits.shape[-1]).astype(jnp.float32)
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    safe = jnp.where(keep, targets, 0)
    nll = jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, safe[:, None], axis=-1)[:, 0]
    total = jnp.sum(jnp.where(keep, nll, 0.0))
    count = jnp.sum(keep)
    return total / count if chunk_size == 0 else total / jnp.maximum(count, 1)
