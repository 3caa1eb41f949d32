"""Seeded defects of the llama-paged-serve oracle (tasks/t2j-mini/llama-paged-serve/solution/app).

Each is a small, realistic slip of a PyTorch-to-JAX port of a paged-attention
serving engine: cache indexing, masks, rotary positions, the sampler's rules and
order, stopping, ordering, checkpoint conversion and independence.
"""

from benchmark_adapter.grading.defects import Defect

DEFECTS: list[Defect] = [
    Defect(
        name="block-table-index",
        file="paged_serve/kv_cache.py",
        old="blocks = block_tables[:, positions // block_size]",
        new="blocks = block_tables[:, positions // block_tables.shape[1]]",
        component="paged_serve.kv_cache.gather_from_cache",
        description="The block table is indexed by position // blocks-per-sequence, "
        "not // block size.",
    ),
    Defect(
        name="paged-mask-off-by-one",
        file="paged_serve/attention.py",
        old="valid = jnp.arange(k.shape[1])[None, :] < context_lens[:, None]",
        new="valid = jnp.arange(k.shape[1])[None, :] <= context_lens[:, None]",
        component="paged_serve.attention.paged_decode_attention",
        description="Decode attends to one slot past the context, reading a stale or foreign key.",
    ),
    Defect(
        name="blocks-needed-floor",
        file="paged_serve/block_manager.py",
        old="return -(-num_tokens // block_size)",
        new="return num_tokens // block_size",
        component="paged_serve.block_manager.blocks_needed",
        description="A prompt that does not fill its last block gets one block too few.",
    ),
    Defect(
        name="decode-context-len-off-by-one",
        file="paged_serve/model_runner.py",
        old="self.params, self.config, self.cache, tokens, positions, tables, positions + 1, slots",
        new="self.params, self.config, self.cache, tokens, positions, tables, positions, slots",
        component="paged_serve.model_runner.ModelRunner.decode",
        description="The engine's decode step excludes the new token itself from its own context.",
    ),
    Defect(
        name="rotary-decode-offset",
        file="paged_serve/model.py",
        old='    x = params["embed"][jnp.asarray(tokens, jnp.int32)]\n',
        new='    x = params["embed"][jnp.asarray(tokens, jnp.int32)]\n'
        "    positions = positions + 1\n",
        component="paged_serve.model.LlamaForCausalLM.decode",
        description="Decode rotates the new token by the sequence length instead of its position.",
    ),
    Defect(
        name="rotary-interleaved",
        file="paged_serve/layers.py",
        old="return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)",
        new="return jnp.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)",
        component="paged_serve.layers.rotate_half",
        description="Rotary pairs interleaved dimensions instead of the source's two halves.",
    ),
    Defect(
        name="prefill-no-causal-mask",
        file="paged_serve/attention.py",
        old="mask = causal[None, None] & key_valid[:, None, None, :]",
        new="mask = key_valid[:, None, None, :]",
        component="paged_serve.attention.prefill_attention",
        description="Prefill lets every prompt token attend to later tokens.",
    ),
    Defect(
        name="gqa-head-mapping",
        file="paged_serve/attention.py",
        old="return jnp.repeat(x, n_heads // x.shape[-2], axis=-2)",
        new="return jnp.tile(x, (1,) * (x.ndim - 2) + (n_heads // x.shape[-2], 1))",
        component="paged_serve.attention.expand_kv_heads",
        description="Query head h reads key/value head h % KV instead of h // (H // KV).",
    ),
    Defect(
        name="rmsnorm-eps-placement",
        file="paged_serve/layers.py",
        old="return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight",
        new="return x / (jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True)) + eps) * weight",
        component="paged_serve.layers.rms_norm",
        description="Epsilon is added to the root instead of the mean square.",
    ),
    Defect(
        name="kv-write-padding-wraps",
        file="paged_serve/kv_cache.py",
        old="slots = jnp.where(slot_mapping >= 0, slot_mapping, total)",
        new="slots = slot_mapping",
        component="paged_serve.kv_cache.write_to_cache",
        description="Padding slots (-1) wrap around and overwrite the last slot of the pool.",
    ),
    Defect(
        name="converter-o-proj-transpose",
        file="paged_serve/checkpoint.py",
        old='"wo": get(p + "self_attn.o_proj.weight", (c.n_heads * hd, c.dim), transpose=True),',
        new='"wo": get(p + "self_attn.o_proj.weight", (c.n_heads * hd, c.dim)),',
        component="paged_serve.checkpoint.load_model",
        description="The square output projection is loaded without transposing "
        "[out, in] to [in, out].",
    ),
    Defect(
        name="converter-drops-last-layer",
        file="paged_serve/checkpoint.py",
        old="for i in range(c.n_layers):",
        new="for i in range(c.n_layers - 1):",
        component="paged_serve.checkpoint.load_model",
        description="The converter stops one decoder layer short.",
    ),
    Defect(
        name="top-p-before-temperature",
        file="paged_serve/sampler.py",
        old="filtered = apply_top_p(apply_top_k(apply_temperature(logits, temperature), top_k), "
        "top_p)",
        new="filtered = apply_temperature(apply_top_p(apply_top_k(logits, top_k), top_p), "
        "temperature)",
        component="paged_serve.sampler.filtered_probs",
        description="Top-k and top-p run on untempered logits; temperature is applied last.",
    ),
    Defect(
        name="top-k-drops-ties",
        file="paged_serve/sampler.py",
        old="    kth = jnp.take_along_axis(sorted_desc, (k - 1)[:, None], axis=-1)\n"
        "    return jnp.where(logits < kth, -jnp.inf, logits)",
        new="    rank = jnp.argsort(jnp.argsort(-logits, axis=-1, stable=True), axis=-1)\n"
        "    return jnp.where(rank >= k[:, None], -jnp.inf, logits)",
        component="paged_serve.sampler.apply_top_k",
        description="Top-k keeps exactly k tokens, dropping tokens tied with the k-th.",
    ),
    Defect(
        name="top-p-exclusive",
        file="paged_serve/sampler.py",
        old="drop_sorted = cumulative <= (1 - top_p)[:, None]",
        new="drop_sorted = cumulative < (1 - top_p)[:, None]",
        component="paged_serve.sampler.apply_top_p",
        description="Top-p keeps a token whose cumulative mass is exactly 1 - p.",
    ),
    Defect(
        name="sampler-key-ignores-seed",
        file="paged_serve/sampler.py",
        old="jax.random.fold_in(jax.random.PRNGKey(s), t)",
        new="jax.random.PRNGKey(t)",
        component="paged_serve.sampler.Sampler",
        description="Every request draws from the same key sequence, whatever its seed.",
    ),
    Defect(
        name="eos-not-stopping",
        file="paged_serve/engine.py",
        old="self.scheduler = Scheduler(self.engine_config, config.eos_token_id)",
        new="self.scheduler = Scheduler(self.engine_config, config.pad_token_id)",
        component="paged_serve.engine.LLMEngine",
        description="The scheduler watches for the pad id, so EOS never stops a request.",
    ),
    Defect(
        name="max-tokens-off-by-one",
        file="paged_serve/scheduler.py",
        old="elif len(seq.output_token_ids) >= seq.sampling_params.max_tokens:",
        new="elif len(seq.output_token_ids) > seq.sampling_params.max_tokens:",
        component="paged_serve.scheduler.Scheduler.postprocess",
        description="Requests generate one token more than max_tokens.",
    ),
    Defect(
        name="finished-output-order",
        file="paged_serve/engine.py",
        old="return sorted(mine, key=lambda out: order[out.request_id])",
        new="return mine",
        component="paged_serve.engine.LLMEngine.generate",
        description="generate returns outputs in the order requests finished, "
        "not the order of prompts.",
    ),
    Defect(
        name="module-renamed",
        file="paged_serve/engine.py",
        old="from paged_serve.model_runner import ModelRunner",
        new="from paged_serve.runner import ModelRunner",
        component="paged_serve.engine",
        description="The engine imports a renamed runner module the layout does not have.",
    ),
    Defect(
        name="optional-torch-import",
        file="paged_serve/checkpoint.py",
        old="from safetensors.numpy import load_file\n",
        new="from safetensors.numpy import load_file\n\ntry:  # faster loading when available\n"
        "    import torch\nexcept ImportError:\n    torch = None\n",
        component="paged_serve.checkpoint",
        description="The converter imports torch when it is installed: not independent.",
    ),
]
