# Candidate-side driver of the litgpt-generate grader. It runs inside the nested sandbox
# (torch absent, no network) after the prelude of grading.run_candidate, which defines INPUTS,
# PARAMS, APP, ASSETS, save(), record() and section().
import importlib
import os

import numpy as np

MODULES = ["litgpt.config", "litgpt.model", "litgpt.utils", "litgpt.generate.base"]
INTERFACE = {
    "litgpt.config": ["Config"],
    "litgpt.model": ["KVCache", "init_kv_cache", "kv_cache_update", "build_rope_cache", "apply_rope",
                     "build_mask_cache", "rms_norm", "forward"],
    "litgpt.utils": ["lazy_load", "load_checkpoint"],
    "litgpt.generate.base": ["sample", "sample_top_p", "next_token", "generate_fn", "generate"],
}
I, P = INPUTS, PARAMS
mods = {}
f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
i32 = lambda x: np.asarray(x, dtype=np.int32)  # noqa: E731

with section("import"):
    missing = []
    for name in MODULES:
        try:
            mods[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
                missing.append(name)
            else:
                raise
    record("missing_modules", missing)
    record("missing_names", [f"{m}.{n}" for m, names in INTERFACE.items() for n in names
                             if m not in mods or not hasattr(mods[m], n)])
    import jax

    M, G = mods.get("litgpt.model"), mods.get("litgpt.generate.base")

with section("params"):
    config = mods["litgpt.config"].Config.from_file(os.path.join(ASSETS, "model_config.yaml"))
    params = mods["litgpt.utils"].load_checkpoint(os.path.join(ASSETS, "lit_model.pth"), config)
    leaves = jax.tree_util.tree_leaves(params)
    record("param_tensors", len(leaves))
    record("param_count", int(sum(np.size(x) for x in leaves)))
    record("params_finite", bool(all(np.all(np.isfinite(np.asarray(x))) for x in leaves)))

with section("l1.rope_cache"):
    cos, sin = M.build_rope_cache(config.block_size, config.rope_n_elem, config.rope_base)
    save("rope_cos", f32(cos))
    save("rope_sin", f32(sin))

with section("l1.apply_rope"):
    pos = i32(I["rope_pos"])
    save("rope_1d", f32(M.apply_rope(I["rope_x"], f32(cos)[pos[0]][None], f32(sin)[pos[0]][None])))
    save("rope_2d", f32(M.apply_rope(I["rope_x"], f32(cos)[pos], f32(sin)[pos])))

with section("l1.rms_norm"):
    save("rms", f32(M.rms_norm(I["rms_x"], I["rms_w"], config.norm_eps)))
    save("rms_small", f32(M.rms_norm(I["rms_x_small"], I["rms_w"], config.norm_eps)))

with section("l1.kv_cache"):
    for case in ("1d", "2d"):
        g = lambda k: I[f"kv_{case}_{k}"]  # noqa: E731
        cache = M.kv_cache_update(M.KVCache(g("k0"), g("v0")), i32(g("pos")), g("k"), g("v"))
        save(f"kv_{case}", np.stack([f32(cache.k), f32(cache.v)]))

for name in ("fwd_a", "fwd_b"):
    with section(f"l2.{name}"):
        logits, _ = M.forward(params, config, i32(I[name]))
        save(name, f32(logits))

with section("l2.decode"):
    cache = M.init_kv_cache(config, 2, P["dec_cache_len"])
    prompt = i32(I["dec_prompt"])
    logits, cache = M.forward(params, config, prompt, np.arange(prompt.shape[1], dtype=np.int32), cache)
    steps = [f32(logits)[:, -1]]
    for s in range(P["decode_steps"]):
        pos = np.array([prompt.shape[1] + s], np.int32)
        logits, cache = M.forward(params, config, i32(I["dec_tokens"][s])[:, None], pos, cache)
        steps.append(f32(logits)[:, -1])
    save("dec_logits", np.stack(steps))
    used = prompt.shape[1] + P["decode_steps"]
    save("dec_cache", np.stack([np.stack([f32(c.k)[:, :, :used], f32(c.v)[:, :, :used]]) for c in cache]))

with section("l2.batched_positions"):
    cache = M.init_kv_cache(config, 2, P["bp_cache_len"])
    _, cache = M.forward(params, config, i32(I["bp_prompt"]), np.arange(6, dtype=np.int32), cache)
    steps = []
    for s in range(I["bp_tokens"].shape[0]):
        logits, cache = M.forward(params, config, i32(I["bp_tokens"][s])[:, None], i32(I["bp_pos"][s])[:, None], cache)
        steps.append(f32(logits)[:, -1])
    save("bp_logits", np.stack(steps))

with section("l3.greedy"):
    out = []
    for request in P["greedy"]:
        tokens = G.generate(params, config, i32(request["prompt"]), request["max_returned_tokens"],
                            temperature=0.0, eos_id=P["eos_id"])
        out.append([int(x) for x in np.asarray(tokens).reshape(-1)])
    record("greedy", out)

with section("l4.sampler"):
    keys = jax.random.split(jax.random.PRNGKey(0), P["sampler_n"])
    drawn = []
    for row, kwargs in zip(I["sp_logits"], P["sampler_settings"]):
        logits = row[None, None]
        draw = jax.vmap(lambda key, logits=logits, kwargs=kwargs: G.sample(logits, key=key, **kwargs))
        drawn.append(np.asarray(draw(keys)).reshape(-1).astype(np.int64))
    save("sp_drawn", np.stack(drawn).astype(np.float32))

with section("l4.generate_distribution"):
    first = []
    for i in range(P["gen_n"]):
        tokens = G.generate(params, config, i32(P["gen_prompt"]), len(P["gen_prompt"]) + 1, include_prompt=False,
                            key=jax.random.PRNGKey(10_000 + i), **P["gen_params"])
        first.append(int(np.asarray(tokens).reshape(-1)[0]))
    record("gen_first", first)

with section("l4.seeds"):
    seqs = []
    for k in P["seed_keys"]:
        tokens = G.generate(params, config, i32(P["seed_prompt"]), len(P["seed_prompt"]) + P["seed_tokens"],
                            include_prompt=False, key=jax.random.PRNGKey(k), **P["seed_params"])
        seqs.append([int(x) for x in np.asarray(tokens).reshape(-1)])
    record("seed_tokens", seqs)
