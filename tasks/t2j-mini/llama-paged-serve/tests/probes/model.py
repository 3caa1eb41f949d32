"""llama-paged-serve: the model's prefill and decode passes, its checkpoint converter and jit.

The candidate's parameter layout is its own, so these probes load parameters through
its `load_params` (from the instruction and /source).
"""

PROBES = {
    "prefill": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "model.prefill",
        "level": 2,
        "component": "paged_serve.model.LlamaForCausalLM.prefill",
        "compare": {"logits/*": "tensor", "probs/*": "distributional"},
    },
    "decode": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "model.decode",
        "level": 2,
        "component": "paged_serve.model.LlamaForCausalLM.decode",
        "compare": {"steps/*": "tensor"},
    },
    "converter": {
        "id": "checkpoint.converter",
        "kind": "converter",
        "level": 1,
        "component": "paged_serve.checkpoint.load_model",
        "description": "load_params holds every raw tensor exactly once (up to layout), read without torch.",
    },
    "check_jit": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "jit",
        "kind": "jit",
        "level": 0,
        "component": "paged_serve.model.LlamaForCausalLM",
        "description": "decode traces under jax.jit.",
    },
}


BLOCK, NUM_BLOCKS = 8, 16


def _i(x):
    import torch

    return torch.from_numpy(x).long()


def _candidate_model(env):
    from paged_serve.checkpoint import load_params
    from paged_serve.config import ModelConfig

    config = ModelConfig.from_json(env.assets / "config.json")
    try:
        params = load_params(str(env.assets / "model.safetensors"), config)
    except (IsADirectoryError, FileNotFoundError, NotADirectoryError):
        params = load_params(str(env.assets), config)
    return params, config


def _reference_model(env):
    import torch
    from paged_serve.checkpoint import load_model

    model, config = load_model(env.assets)
    return model.to(getattr(torch, env.dtype)), config


def _valid_rows(out, lengths):
    import numpy as np

    return [np.asarray(out)[b, : int(n)] for b, n in enumerate(lengths)]


def _layout(lengths, t_max):
    import numpy as np

    tables = np.arange(len(lengths) * 4, dtype="int32").reshape(len(lengths), 4)
    slots = np.full((len(lengths), t_max), -1, dtype="int32")
    for b, n in enumerate(lengths):
        for t in range(n):
            slots[b, t] = tables[b, t // BLOCK] * BLOCK + t % BLOCK
    return tables, slots


def inputs_prefill(env):
    import numpy as np

    lengths = np.array([11, 5, 8], dtype="int32")
    tokens = env.rng.integers(0, 256, (3, 11)).astype("int32")
    tokens[:, 0] = 257
    return {"tokens": tokens, "lengths": lengths}


def reference_prefill(env):
    from paged_serve.kv_cache import PagedKVCache

    model, config = _reference_model(env)
    i = env.inputs
    _, slots = _layout(i["lengths"], i["tokens"].shape[1])
    logits = model.prefill(_i(i["tokens"]), _i(i["lengths"]), PagedKVCache(config, NUM_BLOCKS, BLOCK), _i(slots))
    rows = _valid_rows(logits.float().numpy(), i["lengths"])
    return {"logits": rows, "probs": rows}


def candidate_prefill(env):
    from paged_serve.kv_cache import init_cache
    from paged_serve.model import prefill

    params, config = _candidate_model(env)
    i = env.inputs
    _, slots = _layout(i["lengths"], i["tokens"].shape[1])
    logits, _ = prefill(params, config, init_cache(config, NUM_BLOCKS, BLOCK), i["tokens"], i["lengths"], slots)
    rows = _valid_rows(logits, i["lengths"])
    return {"logits": rows, "probs": rows}


def inputs_decode(env):
    return inputs_prefill(env)


def _decode_inputs(tables, lengths, step):
    import numpy as np

    positions = (lengths + step).astype("int32")
    slots = np.array([tables[b, p // BLOCK] * BLOCK + p % BLOCK for b, p in enumerate(positions)], dtype="int32")
    return positions, slots, (positions + 1).astype("int32")


def reference_decode(env):
    import numpy as np
    from paged_serve.kv_cache import PagedKVCache

    model, config = _reference_model(env)
    i = env.inputs
    tables, slots = _layout(i["lengths"], i["tokens"].shape[1])
    cache = PagedKVCache(config, NUM_BLOCKS, BLOCK)
    logits = model.prefill(_i(i["tokens"]), _i(i["lengths"]), cache, _i(slots))
    tokens = np.array([int(logits[b, n - 1].argmax()) for b, n in enumerate(i["lengths"])], dtype="int32")
    steps = []
    for step in range(3):
        positions, dslots, context = _decode_inputs(tables, i["lengths"], step)
        out = model.decode(_i(tokens), _i(positions), cache, _i(tables), _i(context), _i(dslots))
        steps.append(out.float().numpy())
        tokens = out.argmax(-1).numpy().astype("int32")
    return {"steps": steps}


def candidate_decode(env):
    import numpy as np
    from paged_serve.kv_cache import init_cache
    from paged_serve.model import decode, prefill

    params, config = _candidate_model(env)
    i = env.inputs
    tables, slots = _layout(i["lengths"], i["tokens"].shape[1])
    logits, cache = prefill(params, config, init_cache(config, NUM_BLOCKS, BLOCK), i["tokens"], i["lengths"], slots)
    logits = np.asarray(logits)
    tokens = np.array([int(logits[b, n - 1].argmax()) for b, n in enumerate(i["lengths"])], dtype="int32")
    steps = []
    for step in range(3):
        positions, dslots, context = _decode_inputs(tables, i["lengths"], step)
        out, cache = decode(params, config, cache, tokens, positions, tables, context, dslots)
        out = np.asarray(out)
        steps.append(out)
        tokens = out.argmax(-1).astype("int32")
    return {"steps": steps}


def check_converter(env):
    """Every raw tensor appears once among the candidate's parameters (layout free: sorted shape, sum, norm)."""
    import jax
    import numpy as np
    from safetensors.numpy import load_file

    params, _ = _candidate_model(env)
    leaves = [np.asarray(x, dtype=np.float64) for x in jax.tree_util.tree_leaves(params)]
    raw = [v.astype(np.float64) for v in load_file(str(env.assets / "model.safetensors")).values()]

    def signature(a):
        return (
            tuple(sorted(a.shape)),
            round(float(a.sum()), 3),
            round(float(np.sqrt((a * a).sum())), 3),
        )

    return {
        "same_count": len(leaves) == len(raw),
        "every_tensor_once": sorted(map(signature, leaves)) == sorted(map(signature, raw)),
    }


def check_jit(env):
    import functools

    import jax
    import numpy as np
    from paged_serve.kv_cache import init_cache
    from paged_serve.model import decode, prefill

    params, config = _candidate_model(env)
    lengths = np.array([4, 2], dtype="int32")
    tokens = np.full((2, 4), 65, dtype="int32")
    tables, slots = _layout(lengths, 4)
    step = jax.jit(functools.partial(decode, params, config))
    _, cache = prefill(params, config, init_cache(config, NUM_BLOCKS, BLOCK), tokens, lengths, slots)
    positions, dslots, context = _decode_inputs(tables, lengths, 0)
    logits, _ = step(cache, tokens[:, 0], positions, tables, context, dslots)
    return {"decode_traces": tuple(np.shape(logits)) == (2, config.vocab_size)}
