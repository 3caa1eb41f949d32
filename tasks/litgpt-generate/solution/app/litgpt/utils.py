"""litgpt's checkpoint (`lit_model.pth`), read and converted without torch.

`lazy_load` reads litgpt's checkpoint format (`torch.save` of a state dict: a zip holding
`data.pkl` and one raw storage file per tensor) with the standard library and numpy: the
pickle is read by an unpickler that knows only the few torch names a state dict uses and
refuses every other global. `load_checkpoint` turns it into this port's parameter pytree.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from litgpt.config import Config

STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16, "CharStorage": np.int8,
    "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}  # fmt: skip
Params = dict[str, Any]


class _Storage:
    def __init__(self, name: str) -> None:
        self.dtype = np.dtype(STORAGE_DTYPES[name])


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None) -> np.ndarray:
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * storage.itemsize for s in stride)
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


def lazy_load(path: str | Path) -> dict[str, np.ndarray]:
    """A state dict saved with `torch.save` (litgpt's `lit_model.pth`) as numpy arrays by name."""
    with zipfile.ZipFile(path) as archive:
        pickled = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
        prefix = pickled[: -len("/data.pkl")]
        with archive.open(pickled) as stream:
            state = _StateDictUnpickler(stream, archive, prefix).load()
    return {str(k): v for k, v in state.items()}


def params_from_state_dict(state_dict: dict[str, Any], config: Config) -> Params:
    """The pytree of a litgpt state dict: `transformer.h.0.attn.qkv.weight` becomes
    `params["transformer"]["h"][0]["attn"]["qkv"]["weight"]`, float32, layouts unchanged.

    Raises:
        ValueError: a layer index outside the config's `n_layer`, or a missing layer.
    """
    params: Params = {}
    for name, value in state_dict.items():
        parts = name.split(".")
        node: Any = params
        for part in parts[:-1]:
            if isinstance(node, list):  # the layers of transformer.h
                index = int(part)
                if index >= config.n_layer:
                    raise ValueError(f"{name}: layer {index} is beyond n_layer = {config.n_layer}")
                while len(node) <= index:
                    node.append({})
                node = node[index]
            else:
                node = node.setdefault(part, [] if part == "h" else {})
        node[parts[-1]] = jnp.asarray(np.asarray(value), dtype=jnp.float32)
    if len(params.get("transformer", {}).get("h", [])) != config.n_layer:
        raise ValueError(f"the checkpoint does not hold {config.n_layer} layers")
    return params


def load_checkpoint(checkpoint_path: str | Path, config: Config) -> Params:
    """litgpt's `lit_model.pth` as this port's parameter pytree (every entry, once)."""
    return params_from_state_dict(lazy_load(checkpoint_path), config)
