"""llama-paged-serve: the kernels (norm, rotary, the paged cache, attention, the sampler's masks).

Probed on arrays drawn here, the same on both sides (from the instruction and /source).
"""

PROBES = {
    "norm": {"id": "forward.rms_norm", "level": 1, "component": "paged_serve.layers.rms_norm"},
    "rotate_half": {
        "id": "forward.rotate_half",
        "level": 1,
        "component": "paged_serve.layers.rotate_half",
        "description": "rotate_half (the original's helper, where the candidate keeps it): [-x2, x1] by halves.",
    },
    "rotary": {
        "id": "forward.apply_rotary",
        "level": 1,
        "component": "paged_serve.layers.apply_rotary",
    },
    "write_cache": {
        "id": "kv_cache.write",
        "level": 1,
        "component": "paged_serve.kv_cache.write_to_cache",
    },
    "blocks": {
        "id": "block_manager.arithmetic",
        "level": 1,
        "component": "paged_serve.block_manager.blocks_needed",
        "description": "Blocks a number of tokens needs and the slot of a position (the original's helpers).",
    },
    "gather_cache": {
        "id": "kv_cache.gather",
        "level": 1,
        "component": "paged_serve.kv_cache.gather_from_cache",
        "description": "gather_from_cache (the original's helper, where the candidate keeps it) reads histories in order.",
    },
    "expand_heads": {
        "id": "attention.expand_kv_heads",
        "level": 1,
        "component": "paged_serve.attention.expand_kv_heads",
        "description": "expand_kv_heads (where the candidate keeps it): query head h reads KV head h // (H // KV).",
    },
    "prefill_attention": {
        "id": "attention.prefill",
        "level": 1,
        "component": "paged_serve.attention.prefill_attention",
    },
    "decode_attention": {
        "id": "attention.paged_decode",
        "level": 1,
        "component": "paged_serve.attention.paged_decode_attention",
    },
    "top_k": {
        "id": "sampler.top_k",
        "level": 1,
        "component": "paged_serve.sampler.apply_top_k",
        "description": "apply_top_k (where the candidate keeps it): which tokens survive, ties at the k-th kept.",
    },
    "top_p": {
        "id": "sampler.top_p",
        "level": 1,
        "component": "paged_serve.sampler.apply_top_p",
        "description": "apply_top_p (where the candidate keeps it): which tokens survive, exact mass boundaries too.",
    },
    "sampler": {
        "id": "sampler.filtered_probs",
        "level": 1,
        "component": "paged_serve.sampler.filtered_probs",
    },
}


BLOCK, NUM_BLOCKS = 8, 16


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def _i(x):
    import torch

    return torch.from_numpy(x).long()


def inputs_norm(env):
    return {
        "x": env.rng.standard_normal((3, 5, 64)).astype("float32"),
        "w": (1 + 0.1 * env.rng.standard_normal(64)).astype("float32"),
    }


def reference_norm(env):
    from paged_serve.layers import rms_norm

    return {"y": rms_norm(_t(env, env.inputs["x"]), _t(env, env.inputs["w"]), 1e-5)}


def candidate_norm(env):
    from paged_serve.layers import rms_norm

    return {"y": rms_norm(env.inputs["x"], env.inputs["w"], 1e-5)}


def inputs_rotate_half(env):
    return {"x": env.rng.standard_normal((2, 3, 16)).astype("float32")}


def reference_rotate_half(env):
    from paged_serve.layers import rotate_half

    return {"y": rotate_half(_t(env, env.inputs["x"]))}


def candidate_rotate_half(env):
    from paged_serve.layers import rotate_half

    return {"y": rotate_half(env.inputs["x"])}


def inputs_rotary(env):
    return {
        "x": env.rng.standard_normal((2, 9, 4, 16)).astype("float32"),
        "positions": env.rng.integers(0, 100, (2, 9)).astype("int32"),
    }


def reference_rotary(env):
    from paged_serve.layers import apply_rotary

    return {"y": apply_rotary(_t(env, env.inputs["x"]), _i(env.inputs["positions"]), 10000.0)}


def candidate_rotary(env):
    from paged_serve.layers import apply_rotary

    return {"y": apply_rotary(env.inputs["x"], env.inputs["positions"], 10000.0)}


def inputs_write_cache(env):
    import numpy as np

    slots = env.rng.permutation(NUM_BLOCKS * BLOCK)[:10].astype("int32")
    slots[[2, 7]] = -1
    return {
        "k_cache": env.rng.standard_normal((NUM_BLOCKS, BLOCK, 2, 16)).astype("float32"),
        "v_cache": env.rng.standard_normal((NUM_BLOCKS, BLOCK, 2, 16)).astype("float32"),
        "k": env.rng.standard_normal((10, 2, 16)).astype("float32"),
        "v": env.rng.standard_normal((10, 2, 16)).astype("float32"),
        "slots": np.asarray(slots),
    }


def reference_write_cache(env):
    from paged_serve.kv_cache import write_to_cache

    k_cache, v_cache = _t(env, env.inputs["k_cache"]), _t(env, env.inputs["v_cache"])
    write_to_cache(
        k_cache,
        v_cache,
        _t(env, env.inputs["k"]),
        _t(env, env.inputs["v"]),
        _i(env.inputs["slots"]),
    )
    return {"k_cache": k_cache, "v_cache": v_cache}


def candidate_write_cache(env):
    from paged_serve.kv_cache import write_to_cache

    k_cache, v_cache = write_to_cache(
        env.inputs["k_cache"],
        env.inputs["v_cache"],
        env.inputs["k"],
        env.inputs["v"],
        env.inputs["slots"],
    )
    return {"k_cache": k_cache, "v_cache": v_cache}


def _block_arithmetic():
    from paged_serve.block_manager import blocks_needed, slot_for

    table = [5, 2, 9, 0]
    return {
        "needed": [blocks_needed(n, size) for size in (1, 4, 8) for n in range(0, 33)],
        "slots": [slot_for(table, p, 8) for p in range(32)],
    }


def reference_blocks(env):
    return _block_arithmetic()


def candidate_blocks(env):
    return _block_arithmetic()


def inputs_gather_cache(env):
    tables = env.rng.integers(0, NUM_BLOCKS, (3, 4)).astype("int32")
    return {"cache": env.rng.standard_normal((NUM_BLOCKS, BLOCK, 2, 16)).astype("float32"), "tables": tables}


def reference_gather_cache(env):
    from paged_serve.kv_cache import gather_from_cache

    return {"y": gather_from_cache(_t(env, env.inputs["cache"]), _i(env.inputs["tables"]))}


def candidate_gather_cache(env):
    from paged_serve.kv_cache import gather_from_cache

    return {"y": gather_from_cache(env.inputs["cache"], env.inputs["tables"])}


def inputs_expand_heads(env):
    return {"x": env.rng.standard_normal((3, 5, 2, 16)).astype("float32")}


def reference_expand_heads(env):
    from paged_serve.attention import expand_kv_heads

    return {"y": expand_kv_heads(_t(env, env.inputs["x"]), 4)}


def candidate_expand_heads(env):
    from paged_serve.attention import expand_kv_heads

    return {"y": expand_kv_heads(env.inputs["x"], 4)}


def inputs_prefill_attention(env):
    import numpy as np

    return {
        "q": env.rng.standard_normal((3, 7, 4, 16)).astype("float32"),
        "k": env.rng.standard_normal((3, 7, 2, 16)).astype("float32"),
        "v": env.rng.standard_normal((3, 7, 2, 16)).astype("float32"),
        "lengths": np.array([7, 4, 1], dtype="int32"),
    }


def _valid_rows(out, lengths):
    import numpy as np

    return [np.asarray(out)[b, : int(n)] for b, n in enumerate(lengths)]


def reference_prefill_attention(env):
    from paged_serve.attention import prefill_attention

    i = env.inputs
    out = prefill_attention(_t(env, i["q"]), _t(env, i["k"]), _t(env, i["v"]), _i(i["lengths"]))
    return {"rows": _valid_rows(out.numpy(), i["lengths"])}


def candidate_prefill_attention(env):
    from paged_serve.attention import prefill_attention

    i = env.inputs
    return {"rows": _valid_rows(prefill_attention(i["q"], i["k"], i["v"], i["lengths"]), i["lengths"])}


def inputs_decode_attention(env):
    import numpy as np

    tables = env.rng.permutation(NUM_BLOCKS)[:12].reshape(3, 4).astype("int32")
    return {
        "q": env.rng.standard_normal((3, 4, 16)).astype("float32"),
        "k_cache": env.rng.standard_normal((NUM_BLOCKS, BLOCK, 2, 16)).astype("float32"),
        "v_cache": env.rng.standard_normal((NUM_BLOCKS, BLOCK, 2, 16)).astype("float32"),
        "tables": tables,
        "context_lens": np.array([1, 13, 32], dtype="int32"),
    }


def reference_decode_attention(env):
    from paged_serve.attention import paged_decode_attention

    i = env.inputs
    return {
        "y": paged_decode_attention(
            _t(env, i["q"]),
            _t(env, i["k_cache"]),
            _t(env, i["v_cache"]),
            _i(i["tables"]),
            _i(i["context_lens"]),
        )
    }


def candidate_decode_attention(env):
    from paged_serve.attention import paged_decode_attention

    i = env.inputs
    return {"y": paged_decode_attention(i["q"], i["k_cache"], i["v_cache"], i["tables"], i["context_lens"])}


def inputs_top_k(env):
    import numpy as np

    logits = np.round(env.rng.standard_normal((6, 12)), 1).astype("float32")
    logits[0, :4] = 2.0  # a tie at the k-th value
    return {"logits": logits, "top_k": np.array([3, 1, 0, 12, 20, 5], dtype="int32")}


def reference_top_k(env):
    import torch
    from paged_serve.sampler import apply_top_k

    out = apply_top_k(torch.tensor(env.inputs["logits"]), _i(env.inputs["top_k"]))
    return {"kept": torch.isfinite(out)}


def candidate_top_k(env):
    import numpy as np
    from paged_serve.sampler import apply_top_k

    return {"kept": np.isfinite(np.asarray(apply_top_k(env.inputs["logits"], env.inputs["top_k"])))}


def inputs_top_p(env):
    import numpy as np

    # Equal logits give exact probabilities (1/8 each), so some rows sit exactly on 1 - p.
    flat = np.zeros((4, 8), dtype="float32")
    drawn = env.rng.standard_normal((4, 8)).astype("float32")
    return {
        "logits": np.concatenate([flat, drawn]),
        "top_p": np.array([0.5, 0.75, 0.875, 1.0, 0.9, 0.5, 0.3, 1.0], dtype="float32"),
    }


def reference_top_p(env):
    import torch
    from paged_serve.sampler import apply_top_p

    out = apply_top_p(torch.tensor(env.inputs["logits"]), torch.tensor(env.inputs["top_p"]))
    return {"kept": torch.isfinite(out)}


def candidate_top_p(env):
    import numpy as np
    from paged_serve.sampler import apply_top_p

    return {"kept": np.isfinite(np.asarray(apply_top_p(env.inputs["logits"], env.inputs["top_p"])))}


def inputs_sampler(env):
    import numpy as np

    logits = (2 * env.rng.standard_normal((6, 259))).astype("float32")
    logits[2, :4] = logits[2].max() + 1.0  # a tie at the top-k boundary
    logits[3, :] = 0.0
    logits[3, :10] = 3.0  # flat head: top-p keeps a whole tie group or not
    return {
        "logits": logits,
        "temperature": np.array([0.0, 1.0, 0.7, 1.0, 1.3, 0.5], dtype="float32"),
        "top_k": np.array([-1, 5, 3, -1, 50, 1000], dtype="int32"),
        "top_p": np.array([1.0, 1.0, 1.0, 0.5, 0.9, 0.3], dtype="float32"),
    }


def reference_sampler(env):
    import torch
    from paged_serve.sampler import filtered_probs

    i = env.inputs
    return {
        "probs": filtered_probs(
            _t(env, i["logits"]),
            _t(env, i["temperature"]),
            _i(i["top_k"]),
            torch.tensor(i["top_p"], dtype=getattr(torch, env.dtype)),
        )
    }


def candidate_sampler(env):
    from paged_serve.sampler import filtered_probs

    i = env.inputs
    return {"probs": filtered_probs(i["logits"], i["temperature"], i["top_k"], i["top_p"])}
