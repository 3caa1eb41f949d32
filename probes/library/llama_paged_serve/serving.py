"""llama-paged-serve: kernels, model passes, sampler and the engine (from the instruction and /source).

The candidate's parameter layout is its own, so model probes load parameters
through its `load_params`; the kernels are probed on arrays drawn here.
"""

PROBES = {
    "interface": {
        "id": "interface",
        "kind": "interface",
        "level": 0,
        "locate_failures": True,
        "component": "paged_serve",
        "description": "Every module and public name the instruction lists exists.",
    },
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
    "scheduler": {
        "id": "scheduler.steps",
        "level": 2,
        "component": "paged_serve.scheduler.Scheduler",
        "description": "Scheduler (where the candidate keeps it): batches, block tables and finishes over scripted tokens.",
    },
    "runner": {
        "uses": ["paged_serve.checkpoint.load_model", "paged_serve.model.LlamaForCausalLM"],
        "id": "model_runner.steps",
        "level": 2,
        "component": "paged_serve.model_runner.ModelRunner",
        "description": "ModelRunner (where the candidate keeps it): prefill then decode logits of scheduled sequences.",
        "compare": {"prefill": "tensor", "decode/*": "tensor"},
    },
    "sampler": {
        "id": "sampler.filtered_probs",
        "level": 1,
        "component": "paged_serve.sampler.filtered_probs",
    },
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
    "greedy": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "engine.greedy",
        "level": 3,
        "component": "paged_serve.engine.LLMEngine",
        "timeout_s": 300,
        "description": "Greedy generation of several prompts with continuous batching: tokens, text, finish reasons, order.",
    },
    "converter": {
        "id": "checkpoint.converter",
        "kind": "converter",
        "level": 1,
        "component": "paged_serve.checkpoint.load_model",
        "description": "load_params holds every raw tensor exactly once (up to layout), read without torch.",
    },
    "seeded_sampling": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "sampler.seeded",
        "kind": "behaviour",
        "level": 3,
        "component": "paged_serve.sampler.Sampler",
        "description": "A seeded request is reproducible and its seed matters.",
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


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


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


SCHEDULED = [(5, 3, False), (17, 4, False), (9, 2, True), (30, 5, False), (3, 6, False), (12, 1, False)]


def _sequences(SamplingParams, Sequence):
    seqs = []
    for i, (n, max_tokens, ignore_eos) in enumerate(SCHEDULED):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos)
        seqs.append(Sequence(f"r{i}", i, f"p{i}", [(7 * i + j) % 50 + 3 for j in range(n)], params))
    return seqs


def _schedule_run():
    from paged_serve.config import EngineConfig
    from paged_serve.sampler import SamplingParams
    from paged_serve.scheduler import Scheduler
    from paged_serve.sequence import Sequence

    eos = 2
    scheduler = Scheduler(EngineConfig(block_size=4, num_blocks=24, max_num_seqs=3, max_model_len=64), eos)
    for seq in _sequences(SamplingParams, Sequence):
        scheduler.add(seq)
    steps = []
    for step in range(40):
        if not scheduler.has_unfinished():
            break
        seqs, is_prefill = scheduler.schedule()
        # scripted tokens: request r1 samples eos at its second token, r2 (ignore_eos) at its first
        tokens = [eos if (s.request_id, len(s.output_token_ids)) in {("r1", 1), ("r2", 0)} else 10 + step for s in seqs]
        finished = scheduler.postprocess(seqs, tokens)
        steps.append(
            {
                "prefill": bool(is_prefill),
                "batch": [s.request_id for s in seqs],
                "tables": [list(s.block_table) for s in seqs],
                "finished": [[s.request_id, str(s.finish_reason), len(s.output_token_ids)] for s in finished],
            }
        )
    return {"steps": steps}


def reference_scheduler(env):
    return _schedule_run()


def candidate_scheduler(env):
    return _schedule_run()


def inputs_runner(env):
    return {"tokens": env.rng.integers(3, 200, (3, 4)).astype("int32")}


def _runner_steps(env, runner):
    import numpy as np
    from paged_serve.block_manager import BlockManager
    from paged_serve.sampler import SamplingParams
    from paged_serve.sequence import Sequence

    engine_config = runner.engine_config
    manager = BlockManager(engine_config.num_blocks, engine_config.block_size)
    seqs = _sequences(SamplingParams, Sequence)[:3]
    for seq in seqs:
        manager.allocate(seq)
    out = {"prefill": np.asarray(runner.prefill(seqs), dtype=np.float32), "decode": []}
    for step in range(env.inputs["tokens"].shape[1]):
        for b, seq in enumerate(seqs):
            seq.output_token_ids.append(int(env.inputs["tokens"][b, step]))
            manager.append_slot(seq)
        out["decode"].append(np.asarray(runner.decode(seqs), dtype=np.float32))
    return out


def reference_runner(env):
    import torch
    from paged_serve.config import EngineConfig
    from paged_serve.model_runner import ModelRunner

    model, config = _reference_model(env)
    with torch.no_grad():
        return _runner_steps(env, ModelRunner(model, config, EngineConfig()))


def candidate_runner(env):
    from paged_serve.config import EngineConfig
    from paged_serve.model_runner import ModelRunner

    params, config = _candidate_model(env)
    return _runner_steps(env, ModelRunner(params, config, EngineConfig()))


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


PROMPTS = ["Hello", "The paged cache", "a", "Once upon a time there was", "jax", "1 2 3 4"]
MAX_TOKENS = [6, 12, 3, 9, 16, 5]


def _generate(engine, SamplingParams):
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=(i % 3 == 1)) for i, m in enumerate(MAX_TOKENS)]
    outputs = engine.generate(PROMPTS, params)
    return {
        "outputs": [
            {
                "request_id": str(o.request_id),
                "prompt": o.prompt,
                "prompt_token_ids": list(o.prompt_token_ids),
                "output_token_ids": [int(t) for t in o.output_token_ids],
                "text": o.text,
                "finish_reason": str(o.finish_reason),
            }
            for o in outputs
        ]
    }


def reference_greedy(env):
    import torch
    from paged_serve.engine import LLMEngine
    from paged_serve.sampler import SamplingParams

    model, config = _reference_model(env)
    return _generate(LLMEngine(model.to(getattr(torch, env.dtype)), config), SamplingParams)


def candidate_greedy(env):
    from paged_serve.config import EngineConfig
    from paged_serve.engine import LLMEngine
    from paged_serve.sampler import SamplingParams

    return _generate(LLMEngine.from_pretrained(str(env.assets), EngineConfig()), SamplingParams)


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


def check_seeded_sampling(env):
    from paged_serve.engine import LLMEngine
    from paged_serve.sampler import SamplingParams

    engine = LLMEngine.from_pretrained(str(env.assets))
    runs = []
    for seed in (7, 7, 8):
        params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=seed, ignore_eos=True)
        runs.append([int(t) for t in engine.generate(["Tell me"], [params])[0].output_token_ids])
    return {
        "same_seed_same_tokens": runs[0] == runs[1],
        "twelve_tokens": len(runs[0]) == 12,
        "seed_matters": runs[0] != runs[2],
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


INTERFACE = {
    "config": ["ModelConfig", "EngineConfig"],
    "tokenizer": ["ByteTokenizer"],
    "layers": ["rms_norm", "apply_rotary"],
    "kv_cache": ["init_cache", "write_to_cache"],
    "attention": ["prefill_attention", "paged_decode_attention"],
    "checkpoint": ["load_params"],
    "model": ["prefill", "decode"],
    "sampler": ["SamplingParams", "filtered_probs"],
    "sequence": [],
    "block_manager": [],
    "scheduler": [],
    "model_runner": [],
    "engine": ["LLMEngine"],
}


def check_interface(env):
    import importlib

    out = {}
    for module, names in INTERFACE.items():
        mod = importlib.import_module(f"paged_serve.{module}")
        out[module] = True
        for name in names:
            out[f"{module}.{name}"] = hasattr(mod, name)
    engine = importlib.import_module("paged_serve.engine").LLMEngine
    for method in ("from_pretrained", "add_request", "step", "has_unfinished_requests", "generate"):
        out[f"LLMEngine.{method}"] = hasattr(engine, method)
    return out
