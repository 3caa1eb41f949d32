"""llama-paged-serve: the scheduler, the model runner and the engine; the public interface.

The candidate's parameter layout is its own, so the runner loads parameters through
its `load_params` (from the instruction and /source).
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
    "greedy": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "engine.greedy",
        "level": 3,
        "component": "paged_serve.engine.LLMEngine",
        "timeout_s": 300,
        "description": "Greedy generation of several prompts with continuous batching: tokens, text, finish reasons, order.",
    },
    "seeded_sampling": {
        "uses": ["paged_serve.checkpoint.load_model"],
        "id": "sampler.seeded",
        "kind": "behaviour",
        "level": 3,
        "component": "paged_serve.sampler.Sampler",
        "description": "A seeded request is reproducible and its seed matters.",
    },
}


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
