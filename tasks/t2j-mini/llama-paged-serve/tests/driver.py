# Candidate-side driver of the llama-paged-serve grader. It runs inside the nested
# sandbox (torch absent, no network) after the prelude of grading.run_candidate, which
# defines INPUTS, PARAMS, APP, ASSETS, save(), record() and section().
import importlib
import os
import time

import numpy as np

MODULES = [
    "config", "tokenizer", "layers", "kv_cache", "attention", "model", "checkpoint",
    "sampler", "sequence", "block_manager", "scheduler", "model_runner", "engine",
]
INTERFACE = {
    "config": ["ModelConfig", "EngineConfig"],
    "layers": ["rms_norm", "apply_rotary"],
    "kv_cache": ["init_cache", "write_to_cache"],
    "attention": ["prefill_attention", "paged_decode_attention"],
    "model": ["prefill", "decode"],
    "checkpoint": ["load_params"],
    "sampler": ["SamplingParams", "filtered_probs"],
    "engine": ["LLMEngine"],
}
I = INPUTS
mods = {}

with section("import"):
    missing = []
    for name in MODULES:
        try:
            mods[name] = importlib.import_module(f"paged_serve.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("paged_serve"):
                missing.append(name)
            else:
                raise
    record("missing_modules", missing)
    record("missing_names", [f"{m}.{n}" for m, names in INTERFACE.items() for n in names
                             if m not in mods or not hasattr(mods[m], n)])

np_ = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731

with section("l1.rms"):
    L = mods["layers"]
    save("rms", np_(L.rms_norm(I["rms_x"], I["rms_w"], 1e-5)))
    save("rms_small", np_(L.rms_norm(I["rms_x_small"], I["rms_w"], 1e-5)))

with section("l1.rotary"):
    save("rotary", np_(mods["layers"].apply_rotary(I["rot_x"], I["rot_pos"].astype(np.int32), 10000.0)))

with section("l1.prefill_attention"):
    A = mods["attention"]
    save("prefill_attention", np_(A.prefill_attention(
        I["pre_q"], I["pre_k"], I["pre_v"], I["pre_lengths"].astype(np.int32))))

with section("l1.paged_attention"):
    save("paged_attention", np_(mods["attention"].paged_decode_attention(
        I["pg_q"], I["pg_k_cache"], I["pg_v_cache"], I["pg_tables"].astype(np.int32),
        I["pg_context"].astype(np.int32))))

with section("l1.kv_write"):
    k_cache, v_cache = mods["kv_cache"].write_to_cache(
        I["pg_k_cache"], I["pg_v_cache"], I["kv_k"], I["kv_v"], I["kv_slots"].astype(np.int32))
    save("kv_k_cache", np_(k_cache))
    save("kv_v_cache", np_(v_cache))

with section("params"):
    import jax

    config = mods["config"].ModelConfig.from_json(os.path.join(ASSETS, "config.json"))
    params = mods["checkpoint"].load_params(os.path.join(ASSETS, "model.safetensors"), config)
    leaves = jax.tree_util.tree_leaves(params)
    record("param_count", int(sum(np.size(x) for x in leaves)))
    record("params_finite", bool(all(np.all(np.isfinite(np.asarray(x))) for x in leaves)))

for i in range(PARAMS["l2_batches"]):
    with section(f"l2.{i}"):
        M = mods["model"]
        g = lambda k: I[f"l2_{i}_{k}"].astype(np.int32)  # noqa: E731
        cache = mods["kv_cache"].init_cache(config, *PARAMS["l2_cache"])
        logits, cache = M.prefill(params, config, cache, g("tokens"), g("lengths"), g("prefill_slots"))
        save(f"l2_{i}_prefill", np_(logits))
        steps = []
        for s in range(PARAMS["decode_steps"]):
            pos = g("positions")[s]
            logits, cache = M.decode(params, config, cache, g("decode_tokens")[s], pos, g("block_tables"),
                                     pos + 1, g("decode_slots")[s])
            steps.append(np_(logits))
        save(f"l2_{i}_decode", np.stack(steps))

with section("l4.filtered_probs"):
    save("filtered_probs", np_(mods["sampler"].filtered_probs(
        I["sp_logits"], I["sp_temperature"], I["sp_top_k"].astype(np.int32), I["sp_top_p"])))

with section("l3.serve"):
    E, SP = mods["engine"], mods["sampler"].SamplingParams
    engine_config = mods["config"].EngineConfig(**PARAMS["serve_engine"])
    requests = [SP(temperature=0.0, max_tokens=m, ignore_eos=e)
                for m, e in zip(PARAMS["serve_max_tokens"], PARAMS["serve_ignore_eos"])]
    started = time.perf_counter()
    engine = E.LLMEngine.from_pretrained(ASSETS, engine_config)
    outputs = engine.generate(PARAMS["serve_prompts"], requests)
    record("serve_seconds", time.perf_counter() - started)
    record("serve_tokens", [[int(t) for t in o.output_token_ids] for o in outputs])
    record("serve_finish_reasons", [str(o.finish_reason) for o in outputs])
    record("serve_prompt_order", [str(o.prompt) for o in outputs])

with section("l4.distribution"):
    dist_engine = E.LLMEngine.from_pretrained(ASSETS, engine_config)
    n, seed0 = PARAMS["dist_requests"], PARAMS["dist_seed0"]
    dist = dist_engine.generate([PARAMS["dist_prompt"]] * n,
                                [SP(**PARAMS["dist_params"], max_tokens=1, seed=seed0 + i) for i in range(n)])
    record("dist_tokens", [int(o.output_token_ids[0]) for o in dist])

with section("l4.seeds"):
    seed_engine = E.LLMEngine.from_pretrained(ASSETS, engine_config)
    seeds = PARAMS["seed_seeds"]
    out = seed_engine.generate([PARAMS["seed_prompt"]] * len(seeds),
                               [SP(**PARAMS["seed_params"], seed=s) for s in seeds])
    record("seed_tokens", [[int(t) for t in o.output_token_ids] for o in out])
