"""litgpt-generate: the modules (RoPE tables and rotation, RMSNorm, the KV cache) and the checkpoint.

Probed on arrays drawn here, the same on both sides, through the instruction's interface.
"""

PROBES = {
    "rope_cache": {"id": "model.build_rope_cache", "level": 1, "component": "litgpt.model.build_rope_cache"},
    "apply_rope": {
        "id": "model.apply_rope",
        "level": 1,
        "component": "litgpt.model.apply_rope",
        "description": "RoPE on given cos/sin tables, for positions shared by the batch and per row.",
    },
    "rms_norm": {
        "id": "model.rms_norm",
        "level": 1,
        "component": "litgpt.model.RMSNorm",
        "description": "RMSNorm on unit-scale and tiny inputs (where eps matters).",
    },
    "kv_cache": {
        "id": "model.kv_cache",
        "level": 1,
        "component": "litgpt.model.KVCache",
        "description": "KVCache.forward writes keys and values at positions shared by the batch.",
    },
    "kv_cache_batched": {
        "uses": ["litgpt.model.KVCache"],
        "id": "model.kv_cache.batched",
        "level": 1,
        "component": "litgpt.model.batched_index_copy_",
        "description": "KVCache.forward with per-row positions (batched_index_copy_).",
    },
    "converter": {
        "id": "utils.load_checkpoint",
        "level": 1,
        "component": "litgpt.utils.load_checkpoint",
        "uses": ["litgpt.model.GPT"],
        "description": "The converted checkpoint holds every tensor of lit_model.pth once, values unchanged "
        "(up to layout: each tensor's values, sorted).",
    },
}


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def inputs_rope_cache(env):
    return {"seq_len": 64, "n_elem": 16}


def reference_rope_cache(env):
    import torch
    from litgpt.model import build_rope_cache

    cos, sin = build_rope_cache(env.inputs["seq_len"], env.inputs["n_elem"], base=10000)
    return {"cos": cos.to(torch.float64), "sin": sin.to(torch.float64)}


def candidate_rope_cache(env):
    from litgpt.model import build_rope_cache

    cos, sin = build_rope_cache(env.inputs["seq_len"], env.inputs["n_elem"], 10000)
    return {"cos": cos, "sin": sin}


def inputs_apply_rope(env):
    import numpy as np

    angles = env.rng.uniform(0, 60, (2, 7, 8))
    angles = np.concatenate([angles, angles], axis=-1)
    return {
        "x": env.rng.standard_normal((2, 4, 7, 16)).astype("float32"),
        "cos": np.cos(angles).astype("float32"),
        "sin": np.sin(angles).astype("float32"),
    }


def reference_apply_rope(env):
    from litgpt.model import apply_rope

    i = env.inputs
    x, cos, sin = _t(env, i["x"]), _t(env, i["cos"]), _t(env, i["sin"])
    return {"shared": apply_rope(x, cos[:1], sin[:1]), "per_row": apply_rope(x, cos, sin)}


def candidate_apply_rope(env):
    from litgpt.model import apply_rope

    i = env.inputs
    return {"shared": apply_rope(i["x"], i["cos"][:1], i["sin"][:1]), "per_row": apply_rope(i["x"], i["cos"], i["sin"])}


def inputs_rms_norm(env):
    return {
        "x": env.rng.standard_normal((3, 5, 64)).astype("float32"),
        "small": (1e-3 * env.rng.standard_normal((4, 64))).astype("float32"),
        "w": (1 + 0.3 * env.rng.standard_normal(64)).astype("float32"),
    }


def reference_rms_norm(env):
    from litgpt.model import RMSNorm

    norm = RMSNorm(64, eps=1e-5)
    norm.weight.data = _t(env, env.inputs["w"])
    return {"y": norm(_t(env, env.inputs["x"])), "small": norm(_t(env, env.inputs["small"]))}


def candidate_rms_norm(env):
    from litgpt.model import rms_norm

    i = env.inputs
    return {"y": rms_norm(i["x"], i["w"], 1e-5), "small": rms_norm(i["small"], i["w"], 1e-5)}


def _kv_inputs(env, positions):
    import numpy as np

    t = np.shape(positions)[-1]
    return {
        "k0": env.rng.standard_normal((2, 2, 12, 16)).astype("float32"),
        "v0": env.rng.standard_normal((2, 2, 12, 16)).astype("float32"),
        "k": env.rng.standard_normal((2, 2, t, 16)).astype("float32"),
        "v": env.rng.standard_normal((2, 2, t, 16)).astype("float32"),
        "pos": np.asarray(positions, dtype="int32"),
    }


def _reference_kv(env):
    import torch
    from litgpt.model import KVCache

    i = env.inputs
    cache = KVCache((2, 2, 12, 16), (2, 2, 12, 16), dtype=getattr(torch, env.dtype))
    cache.k.copy_(_t(env, i["k0"])), cache.v.copy_(_t(env, i["v0"]))
    k, v = cache(torch.from_numpy(i["pos"]).long(), _t(env, i["k"]), _t(env, i["v"]))
    return {"k": k, "v": v}


def _candidate_kv(env):
    from litgpt.model import KVCache, kv_cache_update

    i = env.inputs
    cache = kv_cache_update(KVCache(i["k0"], i["v0"]), i["pos"], i["k"], i["v"])
    return {"k": cache.k, "v": cache.v}


def inputs_kv_cache(env):
    return _kv_inputs(env, [0, 1, 2, 7])


def reference_kv_cache(env):
    return _reference_kv(env)


def candidate_kv_cache(env):
    return _candidate_kv(env)


def inputs_kv_cache_batched(env):
    return _kv_inputs(env, [[0, 4, 9], [11, 2, 5]])


def reference_kv_cache_batched(env):
    return _reference_kv(env)


def candidate_kv_cache_batched(env):
    return _candidate_kv(env)


def inputs_converter(env):
    import numpy as np
    import torch

    state = torch.load(env.assets / "lit_model.pth", weights_only=True)
    tensors = [np.sort(v.double().numpy().ravel()) for v in state.values()]
    return {"values": np.concatenate(tensors), "sizes": np.array([t.size for t in tensors])}


def _sorted_tensors(inputs):
    import numpy as np

    return np.split(inputs["values"], np.cumsum(inputs["sizes"])[:-1])


def reference_converter(env):
    """Each tensor of the original's model as its load_checkpoint fills it (strict: exactly the
    file's tensors, in its order), values sorted."""
    import numpy as np
    from lightning.fabric import Fabric
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import load_checkpoint

    model = GPT(Config.from_file(env.assets / "model_config.yaml"))
    load_checkpoint(Fabric(accelerator="cpu", devices=1), model, env.assets / "lit_model.pth")
    return {"tensors": [np.sort(v.double().numpy().ravel()) for v in model.state_dict().values()]}


def candidate_converter(env):
    """Each reference tensor's values, sorted, from the candidate leaf closest to it (layout free)."""
    import jax
    import numpy as np
    from litgpt.config import Config
    from litgpt.utils import load_checkpoint

    config = Config.from_file(env.assets / "model_config.yaml")
    params = load_checkpoint(env.assets / "lit_model.pth", config)
    leaves = [np.sort(np.asarray(x, np.float64).ravel()) for x in jax.tree_util.tree_leaves(params)]
    matched = []
    for want in _sorted_tensors(env.inputs):
        same = [i for i, leaf in enumerate(leaves) if leaf.size == want.size]
        if not same:
            return {"tensors": matched, "missing": f"no leaf of {want.size} values"}
        best = min(same, key=lambda i: float(np.abs(leaves[i] - want).max()))
        matched.append(leaves.pop(best))
    return {"tensors": matched}
