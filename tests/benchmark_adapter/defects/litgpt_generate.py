"""Seeded defects of the litgpt-generate oracle (tasks/litgpt-generate/solution/app).

Each is a small, realistic slip of a PyTorch-to-JAX port of litgpt's KV-cache generation:
cache indexing, RoPE layout, grouped-query head mapping, masking, softmax, dtype promotion,
checkpoint conversion, the sampler's rules and order, and the generation loop.
"""

from benchmark_adapter.grading.defects import Defect

MODEL = "litgpt/model.py"
BASE = "litgpt/generate/base.py"

DEFECTS: list[Defect] = [
    Defect(
        name="kv-write-off-by-one",
        file=MODEL,
        old="ck = ck.at[:, :, input_pos].set(k)",
        new="ck = ck.at[:, :, input_pos + 1].set(k)",
        component="litgpt.model.KVCache.forward",
        description="Keys are written one slot past their position (values where they belong).",
    ),
    Defect(
        name="kv-value-from-key",
        file=MODEL,
        old="cv = cv.at[:, :, input_pos].set(v)",
        new="cv = cv.at[:, :, input_pos].set(k)",
        component="litgpt.model.KVCache.forward",
        description="The value cache is filled with the keys.",
    ),
    Defect(
        name="kv-batched-rows-reversed",
        file=MODEL,
        old="rows = jnp.arange(B)[:, None]",
        new="rows = jnp.arange(B)[::-1, None]",
        component="litgpt.model.batched_index_copy_",
        description="With per-row positions, each row's keys and values land in another row's cache.",
    ),
    Defect(
        name="kv-cache-bfloat16",
        file=MODEL,
        old="ck, cv = jnp.asarray(cache.k)[:B].astype(k.dtype), jnp.asarray(cache.v)[:B].astype(v.dtype)",
        new=("ck, cv = jnp.asarray(cache.k)[:B].astype(jnp.bfloat16), jnp.asarray(cache.v)[:B].astype(jnp.bfloat16)"),
        component="litgpt.model.KVCache.forward",
        description="The cache is kept in bfloat16, so every cached key and value loses precision.",
    ),
    Defect(
        name="rope-interleaved",
        file=MODEL,
        old="rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)",
        new="rotated = jnp.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)",
        component="litgpt.model.apply_rope",
        description="RoPE rotates interleaved pairs (GPT-J layout) instead of litgpt's two halves.",
    ),
    Defect(
        name="rope-frequency-exponent",
        file=MODEL,
        old="theta = 1.0 / (base ** (jnp.arange(0, n_elem, 2, dtype=jnp.float32) / n_elem))",
        new="theta = 1.0 / (base ** (jnp.arange(0, n_elem // 2, dtype=jnp.float32) / n_elem))",
        component="litgpt.model.build_rope_cache",
        description="The inverse frequencies use i / n_elem instead of 2i / n_elem.",
    ),
    Defect(
        name="rope-frequencies-repeated",
        file=MODEL,
        old="angles = jnp.tile(jnp.outer(positions, theta), (1, 2))[:, :n_elem]",
        new="angles = jnp.repeat(jnp.outer(positions, theta), 2, axis=1)[:, :n_elem]",
        component="litgpt.model.build_rope_cache",
        description="Each frequency is repeated in place ([a, a, b, b]) instead of the table tiled ([a, b, a, b]).",
    ),
    Defect(
        name="rope-positions-from-zero",
        file=MODEL,
        old="cos, sin = cos[input_pos], sin[input_pos]",
        new="cos, sin = cos[jnp.arange(T)], sin[jnp.arange(T)]",
        component="litgpt.model.GPT.forward",
        description="Every cached step rotates its tokens as if they started at position 0.",
    ),
    Defect(
        name="gqa-tiled-heads",
        file=MODEL,
        old="k = jnp.repeat(k, nh // ng, axis=1)\n        v = jnp.repeat(v, nh // ng, axis=1)",
        new="k = jnp.tile(k, (1, nh // ng, 1, 1))\n        v = jnp.tile(v, (1, nh // ng, 1, 1))",
        component="litgpt.model.CausalSelfAttention.forward",
        description="Query head h reads key/value head h % G instead of h // (nh // G).",
    ),
    Defect(
        name="qkv-split-order",
        file=MODEL,
        old='q, k, v = jnp.split(linear(p["qkv"], x), [nh * hs, nh * hs + ng * hs], axis=-1)',
        new='q, v, k = jnp.split(linear(p["qkv"], x), [nh * hs, nh * hs + ng * hs], axis=-1)',
        component="litgpt.model.CausalSelfAttention.forward",
        description="The fused projection is split as query, value, key.",
    ),
    Defect(
        name="query-heads-layout",
        file=MODEL,
        old="q = q.reshape(B, T, nh, hs).transpose(0, 2, 1, 3)",
        new="q = q.reshape(B, T, hs, nh).transpose(0, 3, 1, 2)",
        component="litgpt.model.CausalSelfAttention.forward",
        description="The query features are unflattened head-minor instead of head-major.",
    ),
    Defect(
        name="cache-mask-off-by-one",
        file=MODEL,
        old="mask = build_mask_cache(max_seq_length)[0, 0][input_pos]  # [T, S] or [B, T, S]",
        new="mask = build_mask_cache(max_seq_length)[0, 0][jnp.minimum(input_pos + 1, max_seq_length - 1)]",
        component="litgpt.model.GPT.forward",
        description="Through the cache, each token also attends to the slot after its own.",
    ),
    Defect(
        name="cache-mask-missing",
        file=MODEL,
        old="mask = build_mask_cache(max_seq_length)[0, 0][input_pos]  # [T, S] or [B, T, S]",
        new="mask = jnp.ones(input_pos.shape + (max_seq_length,), bool)",
        component="litgpt.model.GPT.forward",
        description="Through the cache, every token attends to the whole buffer, unwritten slots included.",
    ),
    Defect(
        name="prefill-not-causal",
        file=MODEL,
        old="cos, sin, mask = cos[None], sin[None], build_mask_cache(T)",
        new="cos, sin, mask = cos[None], sin[None], jnp.ones((1, 1, T, T), bool)",
        component="litgpt.model.CausalSelfAttention.scaled_dot_product_attention",
        description="Without a cache, tokens attend to later tokens (is_causal lost).",
    ),
    Defect(
        name="softmax-wrong-axis",
        file=MODEL,
        old="weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)",
        new="weights = jnp.nan_to_num(jax.nn.softmax(scores, axis=-2)).astype(q.dtype)",
        component="litgpt.model.CausalSelfAttention.scaled_dot_product_attention",
        description="Attention weights are normalized over the queries instead of the keys.",
    ),
    Defect(
        name="softmax-unstable-masked",
        file=MODEL,
        old="weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype)",
        new="weights = (jnp.exp(scores) / (1e-6 + jnp.sum(jnp.exp(scores), axis=-1, keepdims=True))).astype(q.dtype)",
        component="litgpt.model.CausalSelfAttention.scaled_dot_product_attention",
        description="A hand-written softmax without the max shift and with an epsilon in its denominator.",
    ),
    Defect(
        name="attention-scale",
        file=MODEL,
        old="1.0 / math.sqrt(hs))",
        new="1.0 / math.sqrt(config.n_embd))",
        component="litgpt.model.CausalSelfAttention.scaled_dot_product_attention",
        description="Scores are scaled by 1/sqrt(n_embd) instead of 1/sqrt(head_size).",
    ),
    Defect(
        name="rmsnorm-eps-outside",
        file=MODEL,
        old="normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)",
        new="normed = x32 / (jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)) + eps)",
        component="litgpt.model.RMSNorm",
        description="eps is added to the root mean square instead of the mean square.",
    ),
    Defect(
        name="rmsnorm-bfloat16",
        file=MODEL,
        old="x32 = x.astype(jnp.float32)",
        new="x32 = x.astype(jnp.bfloat16)",
        component="litgpt.model.RMSNorm",
        description="RMSNorm computes in bfloat16 where the source upcasts to float32.",
    ),
    Defect(
        name="swiglu-gate-swapped",
        file=MODEL,
        old='jax.nn.silu(linear(p["fc_1"], x)) * linear(p["fc_2"], x)',
        new='linear(p["fc_1"], x) * jax.nn.silu(linear(p["fc_2"], x))',
        component="litgpt.model.LLaMAMLP",
        description="SiLU gates fc_2 instead of fc_1.",
    ),
    Defect(
        name="attention-residual-dropped",
        file=MODEL,
        old="    x = h + x\n",
        new="    x = h\n",
        component="litgpt.model.Block.forward",
        description="The block loses its first residual connection.",
    ),
    Defect(
        name="lm-head-tied",
        file=MODEL,
        old='return linear(params["lm_head"], x), new_cache',
        new='return x @ params["transformer"]["wte"]["weight"].T, new_cache',
        component="litgpt.model.GPT.forward",
        description="The output head reuses the embedding (tied weights) although litgpt's Llama has its own lm_head.",
    ),
    Defect(
        name="checkpoint-bfloat16",
        file="litgpt/utils.py",
        old="node[parts[-1]] = jnp.asarray(np.asarray(value), dtype=jnp.float32)",
        new="node[parts[-1]] = jnp.asarray(np.asarray(value), dtype=jnp.bfloat16)",
        component="litgpt.utils.load_checkpoint",
        description="The converted parameters are kept in bfloat16, so every matmul is promoted from rounded weights.",
    ),
    Defect(
        name="temperature-after-top-p",
        file=BASE,
        old=(
            "        logits = logits / temperature\n"
            "        if top_p < 1.0:\n"
            "            logits = sample_top_p(logits, top_p)\n"
        ),
        new=(
            "        if top_p < 1.0:\n"
            "            logits = sample_top_p(logits, top_p)\n"
            "        logits = logits / temperature\n"
        ),
        component="litgpt.generate.base.sample",
        description="Top-p filters the unscaled logits; temperature is applied afterwards.",
    ),
    Defect(
        name="top-k-after-top-p",
        file=BASE,
        old=(
            "    if top_k is not None:\n"
            "        values, indices = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))\n"
            "        logits = jnp.full_like(logits, -jnp.inf).at[indices].set(values)\n"
            "    if temperature > 0.0 and top_p > 0.0:\n"
            "        logits = logits / temperature\n"
            "        if top_p < 1.0:\n"
            "            logits = sample_top_p(logits, top_p)\n"
        ),
        new=(
            "    if temperature > 0.0 and top_p > 0.0:\n"
            "        logits = logits / temperature\n"
            "        if top_p < 1.0:\n"
            "            logits = sample_top_p(logits, top_p)\n"
            "    if top_k is not None:\n"
            "        values, indices = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))\n"
            "        logits = jnp.full_like(logits, -jnp.inf).at[indices].set(values)\n"
            "    if temperature > 0.0 and top_p > 0.0:\n"
        ),
        component="litgpt.generate.base.sample",
        description="Top-p runs over the whole row and top-k afterwards, instead of top-k first.",
    ),
    Defect(
        name="temperature-multiplied",
        file=BASE,
        old="        logits = logits / temperature\n",
        new="        logits = logits * temperature\n",
        component="litgpt.generate.base.sample",
        description="Logits are multiplied by the temperature instead of divided.",
    ),
    Defect(
        name="top-k-off-by-one",
        file=BASE,
        old="min(top_k, logits.shape[-1])",
        new="min(top_k + 1, logits.shape[-1])",
        component="litgpt.generate.base.sample",
        description="Top-k keeps k + 1 tokens.",
    ),
    Defect(
        name="top-p-sorted-descending",
        file=BASE,
        old="order = jnp.argsort(logits)",
        new="order = jnp.argsort(-logits)",
        component="litgpt.generate.base.sample_top_p",
        description="Top-p sorts descending but keeps the source's ascending rule, so it drops the likeliest tokens.",
    ),
    Defect(
        name="multinomial-on-probabilities",
        file=BASE,
        old="jax.random.categorical(key, jnp.log(probs), shape=(1,))",
        new="jax.random.categorical(key, probs, shape=(1,))",
        component="litgpt.generate.base.multinomial_num_samples_1",
        description="Probabilities are passed where categorical expects logits, flattening the distribution.",
    ),
    Defect(
        name="eos-not-returned",
        file=BASE,
        old="include_prompt=include_prompt, include_eos=True,",
        new="include_prompt=include_prompt, include_eos=False,",
        component="litgpt.generate.base.generate",
        description="generate drops the end-of-sequence token that litgpt returns.",
    ),
    Defect(
        name="decode-position-off-by-one",
        file=BASE,
        old="input_pos = jnp.array([prompt_size + current_idx], dtype=jnp.int32)",
        new="input_pos = jnp.array([prompt_size + current_idx - 1], dtype=jnp.int32)",
        component="litgpt.generate.base.generate_fn",
        description="Each decode step writes and reads one position early, overwriting the previous token's slot.",
    ),
    Defect(
        name="one-token-short",
        file=BASE,
        old="for current_idx in range(max_returned_tokens - prompt_size):",
        new="for current_idx in range(max_returned_tokens - prompt_size - 1):",
        component="litgpt.generate.base.generate_fn",
        description="Generation stops one token before max_returned_tokens.",
    ),
]
