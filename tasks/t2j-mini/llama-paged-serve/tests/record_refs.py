"""Record the frozen references of the llama-paged-serve grader from the PyTorch original.

Task authors run this (with torch) after any change to the original or its assets:

    python tests/record_refs.py

It writes `tests/inputs.npz` and `tests/inputs.json` (the fixed inputs the grader
feeds the candidate), `tests/refs/refs.npz` and `tests/refs/meta.json` (the
original's outputs, its end-to-end wall time, and the sampling band measured as
the original sampler's own spread over seeds) and `tests/refs/VERSIONS.json`.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
TASK = TESTS.parent
SOURCE = TASK / "environment" / "source"
ASSETS = TASK / "environment" / "assets"

NUM_BLOCKS, BLOCK_SIZE, MAX_BLOCKS = 64, 8, 16  # cache of the step-wise (L2) checks (the engine's geometry)
DECODE_STEPS = 10
RAGGED_TEXTS = [  # three batches of four prompts, lengths straddling block boundaries
    ["the", "a dog ran", "my friend liked the", "the old man carried a red box"],
    ["she ran", "our team watched", "the robot painted the river", ""],
    ["a small bird found an apple a", "he", "the cat ope", "my friend ran to the"],
]
SERVE_PROMPTS = [
    "the cat", "a dog looked", "my friend ran to the", "she opened", "the robot carried a blue",
    "he", "our team found an apple", "the old man painted a red", "a small bird", "the moon",
]
SERVE_MAX_TOKENS = [40, 40, 40, 8, 40, 5, 3, 40, 12, 40]
SERVE_IGNORE_EOS = [False, False, True, False, False, False, False, True, False, False]
SERVE_ENGINE = {"block_size": 8, "num_blocks": 64, "max_num_seqs": 4, "max_model_len": 128}
DIST_PROMPT = "the cat "
DIST_PARAMS = {"temperature": 0.9, "top_k": 6, "top_p": 0.95}
DIST_REQUESTS = 256
DIST_SEED0 = 1000
BAND_RUNS = 64
SEED_PROMPT = "a small bird "
SEED_SEEDS = [7, 7, 8, 9]
SEED_PARAMS = {"temperature": 1.0, "top_k": 8, "top_p": 1.0, "max_tokens": 12}


def sampler_rows(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, ...]:
    """Logit rows and parameters that separate the sampler's transforms and their order."""
    rows, temps, ks, ps = [], [], [], []

    def add(logits, t, k, p):
        rows.append(np.asarray(logits, np.float32)), temps.append(t), ks.append(k), ps.append(p)

    add(2.0 * rng.normal(size=vocab), 0.7, 10, 0.9)
    add(2.0 * rng.normal(size=vocab), 1.3, -1, 0.8)
    add(3.0 * rng.normal(size=vocab), 0.5, 5, 1.0)
    add(1.0 * rng.normal(size=vocab), 1.0, 0, 0.5)
    add(4.0 * rng.normal(size=vocab), 0.3, -1, 0.7)  # temperature before top-p matters here
    add(4.0 * rng.normal(size=vocab), 2.5, 20, 0.6)
    tie = np.full(vocab, -2.0)
    tie[[3, 7, 11, 19, 23, 40]] = [5.0, 4.0, 3.0, 3.0, 3.0, 2.0]
    add(tie, 1.0, 3, 1.0)  # ties at the k-th value are kept
    flat = np.full(vocab, -1e9)
    flat[[10, 20, 30, 40]] = 0.0
    add(flat, 1.0, -1, 0.5)  # cumulative mass hits 1 - p exactly: inclusive drop
    add(flat, 1.0, -1, 0.75)
    add(2.0 * rng.normal(size=vocab), 0.0, 4, 0.5)  # greedy row
    return (np.stack(rows), np.array(temps, np.float32), np.array(ks, np.int64), np.array(ps, np.float32))


def ragged_batch(tok, texts: list[str], rng: np.random.Generator, greedy_next) -> dict[str, np.ndarray]:
    """Right-padded prompts with shuffled block tables, and the slots of every decode step."""
    ids = [tok.encode(t) for t in texts]
    lengths = np.array([len(x) for x in ids], np.int64)
    width = 32
    tokens = np.full((len(ids), width), tok.pad_token_id, np.int64)
    for b, x in enumerate(ids):
        tokens[b, : len(x)] = x
    blocks = rng.permutation(NUM_BLOCKS)[: len(ids) * MAX_BLOCKS].reshape(len(ids), MAX_BLOCKS)
    slot = lambda b, p: blocks[b, p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE  # noqa: E731
    prefill_slots = np.full((len(ids), width), -1, np.int64)
    for b, n in enumerate(lengths):
        prefill_slots[b, :n] = [slot(b, p) for p in range(n)]
    steps = DECODE_STEPS
    positions = lengths[None, :] + np.arange(steps)[:, None]  # [S, B]
    decode_slots = np.array([[slot(b, p) for b, p in enumerate(row)] for row in positions])
    return {
        "tokens": tokens, "lengths": lengths, "prefill_slots": prefill_slots,
        "block_tables": blocks.astype(np.int64), "positions": positions.astype(np.int64),
        "decode_slots": decode_slots.astype(np.int64),
    }


def main() -> None:
    sys.path.insert(0, str(SOURCE))
    import torch
    from paged_serve import attention, kv_cache, layers, sampler
    from paged_serve.checkpoint import load_model
    from paged_serve.config import EngineConfig
    from paged_serve.engine import LLMEngine
    from paged_serve.sampler import SamplingParams
    from paged_serve.tokenizer import ByteTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(2024)
    t = torch.from_numpy
    inputs: dict[str, np.ndarray] = {}
    refs: dict[str, np.ndarray] = {}
    model, config = load_model(ASSETS)
    tok = ByteTokenizer()

    # L1: modules on fixed inputs
    inputs["rms_x"] = rng.normal(size=(3, 5, 64)).astype(np.float32)
    inputs["rms_x_small"] = (1e-3 * rng.normal(size=(4, 64))).astype(np.float32)
    inputs["rms_w"] = (1.0 + 0.1 * rng.normal(size=64)).astype(np.float32)
    refs["rms"] = layers.rms_norm(t(inputs["rms_x"]), t(inputs["rms_w"]), 1e-5).numpy()
    refs["rms_small"] = layers.rms_norm(t(inputs["rms_x_small"]), t(inputs["rms_w"]), 1e-5).numpy()
    inputs["rot_x"] = rng.normal(size=(2, 9, 4, 16)).astype(np.float32)
    inputs["rot_pos"] = np.stack([np.arange(9), 100 + 3 * np.arange(9)]).astype(np.int64)
    refs["rotary"] = layers.apply_rotary(t(inputs["rot_x"]), t(inputs["rot_pos"]), 10000.0).numpy()
    inputs["pre_q"] = rng.normal(size=(3, 12, 4, 16)).astype(np.float32)
    inputs["pre_k"] = rng.normal(size=(3, 12, 2, 16)).astype(np.float32)
    inputs["pre_v"] = rng.normal(size=(3, 12, 2, 16)).astype(np.float32)
    inputs["pre_lengths"] = np.array([12, 7, 3], np.int64)
    refs["prefill_attention"] = attention.prefill_attention(
        *(t(inputs[k]) for k in ("pre_q", "pre_k", "pre_v", "pre_lengths"))
    ).numpy()
    inputs["pg_k_cache"] = rng.normal(size=(16, 8, 2, 16)).astype(np.float32)
    inputs["pg_v_cache"] = rng.normal(size=(16, 8, 2, 16)).astype(np.float32)
    inputs["pg_tables"] = rng.permutation(16)[:12].reshape(3, 4).astype(np.int64)
    inputs["pg_context"] = np.array([5, 17, 32], np.int64)
    inputs["pg_q"] = rng.normal(size=(3, 4, 16)).astype(np.float32)
    paged = attention.paged_decode_attention(
        *(t(inputs[k]) for k in ("pg_q", "pg_k_cache", "pg_v_cache", "pg_tables", "pg_context"))
    ).numpy()
    refs["paged_attention"] = paged
    refs["paged_attention_dense"] = dense_decode_reference(inputs)
    assert np.allclose(paged, refs["paged_attention_dense"], atol=1e-5), "paged attention != dense"
    inputs["kv_k"] = rng.normal(size=(6, 2, 16)).astype(np.float32)
    inputs["kv_v"] = rng.normal(size=(6, 2, 16)).astype(np.float32)
    inputs["kv_slots"] = np.array([3, 77, -1, 8, 126, -1], np.int64)
    k_cache, v_cache = t(inputs["pg_k_cache"].copy()), t(inputs["pg_v_cache"].copy())
    kv_cache.write_to_cache(k_cache, v_cache, t(inputs["kv_k"]), t(inputs["kv_v"]), t(inputs["kv_slots"]))
    refs["kv_k_cache"], refs["kv_v_cache"] = k_cache.numpy(), v_cache.numpy()

    # parameter correspondence
    refs["param_count"] = np.array(sum(p.numel() for p in model.parameters()), np.int64)

    # L2: prefill and teacher-forced decode logits over ragged batches
    for i, texts in enumerate(RAGGED_TEXTS):
        batch = ragged_batch(tok, texts, rng, None)
        cache = kv_cache.PagedKVCache(config, NUM_BLOCKS, BLOCK_SIZE)
        logits = model.prefill(t(batch["tokens"]), t(batch["lengths"]), cache, t(batch["prefill_slots"]))
        refs[f"l2_{i}_prefill"] = logits.numpy()
        last = logits[torch.arange(len(texts)), t(batch["lengths"]) - 1]
        step_tokens, step_logits = [], []
        for s in range(DECODE_STEPS):
            nxt = last.argmax(-1)
            step_tokens.append(nxt.numpy())
            pos = t(batch["positions"][s])
            last = model.decode(nxt, pos, cache, t(batch["block_tables"]), pos + 1, t(batch["decode_slots"][s]))
            step_logits.append(last.numpy())
        batch["decode_tokens"] = np.stack(step_tokens).astype(np.int64)
        refs[f"l2_{i}_decode"] = np.stack(step_logits)
        inputs.update({f"l2_{i}_{k}": v for k, v in batch.items()})

    # L4 (isolated): the sampler's filtered distribution
    logits, temps, ks, ps = sampler_rows(rng, config.vocab_size)
    inputs.update(sp_logits=logits, sp_temperature=temps, sp_top_k=ks, sp_top_p=ps)
    refs["filtered_probs"] = sampler.filtered_probs(t(logits), t(temps), t(ks), t(ps)).numpy()

    # L3: end-to-end greedy serving, timed like the candidate is (after the steps above)
    serve_params = [
        SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=e)
        for m, e in zip(SERVE_MAX_TOKENS, SERVE_IGNORE_EOS, strict=True)
    ]
    times = []
    for _ in range(3):  # the median of three runs, each from engine construction on
        started = time.perf_counter()
        engine = LLMEngine.from_pretrained(ASSETS, EngineConfig(**SERVE_ENGINE))
        outputs = engine.generate(SERVE_PROMPTS, serve_params)
        times.append(time.perf_counter() - started)
    serve_seconds = sorted(times)[1]
    refs["serve_tokens"] = pad_outputs([o.output_token_ids for o in outputs], max(SERVE_MAX_TOKENS))
    finish = [o.finish_reason for o in outputs]
    assert "stop" in finish and "length" in finish, finish
    stopped = [len(o.output_token_ids) < m for o, m in zip(outputs, SERVE_MAX_TOKENS, strict=True)]
    assert any(stopped), "no request stops at EOS"
    check_greedy_margins(model, config, outputs)

    # L4 (live): first-token distribution of seeded requests through the engine
    prompt_ids = torch.tensor([tok.encode(DIST_PROMPT)])
    cache = kv_cache.PagedKVCache(config, 4, BLOCK_SIZE)
    slots = torch.arange(prompt_ids.shape[1])[None]
    prompt_logits = model.prefill(prompt_ids, torch.tensor([prompt_ids.shape[1]]), cache, slots)[:, -1]
    one = lambda v, dt: torch.tensor([v], dtype=dt)  # noqa: E731
    dist_probs = sampler.filtered_probs(
        prompt_logits, one(DIST_PARAMS["temperature"], torch.float32), one(DIST_PARAMS["top_k"], torch.long),
        one(DIST_PARAMS["top_p"], torch.float32),
    )[0].numpy()
    refs["dist_probs"] = dist_probs
    dist_engine = LLMEngine.from_pretrained(ASSETS, EngineConfig(**SERVE_ENGINE))
    dist_out = dist_engine.generate(
        [DIST_PROMPT] * DIST_REQUESTS,
        [SamplingParams(**DIST_PARAMS, max_tokens=1, seed=DIST_SEED0 + i) for i in range(DIST_REQUESTS)],
    )
    engine_distance = js_distance(histogram([o.output_token_ids[0] for o in dist_out], len(dist_probs)), dist_probs)
    distances = []
    for run in range(BAND_RUNS):
        drawn = [
            int(torch.multinomial(t(dist_probs), 1, generator=torch.Generator().manual_seed(10_000 * (run + 1) + i)))
            for i in range(DIST_REQUESTS)
        ]
        distances.append(js_distance(histogram(drawn, len(dist_probs)), dist_probs))
    seed_engine = LLMEngine.from_pretrained(ASSETS, EngineConfig(**SERVE_ENGINE))
    seed_out = seed_engine.generate(
        [SEED_PROMPT] * len(SEED_SEEDS), [SamplingParams(**SEED_PARAMS, seed=s) for s in SEED_SEEDS]
    )
    seed_tokens = [o.output_token_ids for o in seed_out]
    assert seed_tokens[0] == seed_tokens[1] and len({tuple(x) for x in seed_tokens}) > 1, seed_tokens

    np.savez(TESTS / "inputs.npz", **inputs)
    (TESTS / "inputs.json").write_text(json.dumps({
        "l2_batches": len(RAGGED_TEXTS), "l2_cache": [NUM_BLOCKS, BLOCK_SIZE], "decode_steps": DECODE_STEPS,
        "serve_prompts": SERVE_PROMPTS, "serve_max_tokens": SERVE_MAX_TOKENS, "serve_ignore_eos": SERVE_IGNORE_EOS,
        "serve_engine": SERVE_ENGINE, "dist_prompt": DIST_PROMPT, "dist_params": DIST_PARAMS,
        "dist_requests": DIST_REQUESTS, "dist_seed0": DIST_SEED0, "seed_prompt": SEED_PROMPT,
        "seed_seeds": SEED_SEEDS, "seed_params": SEED_PARAMS,
    }, indent=1) + "\n")
    np.savez(TESTS / "refs" / "refs.npz", **refs)
    meta = {
        "serve_seconds": serve_seconds,
        "serve_finish_reasons": finish,
        "serve_prompt_order": SERVE_PROMPTS,
        "dist_band": float(max(distances)),
        "dist_reference_engine_distance": engine_distance,
        "dist_band_runs": BAND_RUNS,
    }
    (TESTS / "refs" / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (TESTS / "refs" / "VERSIONS.json").write_text(json.dumps({
        "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "threads": 1,
    }, indent=1) + "\n")
    print(json.dumps(meta, indent=1))


def dense_decode_reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Decode attention over each sequence's keys laid out contiguously (no paging), in float64.

    A stand-in, on purpose: a second reference for paged attention that knows nothing of pages, so
    that a port matching the original's paging but not attention itself is told apart. It must
    give the original's `paged_decode_attention` (asserted when recording, and tested:
    tests/benchmark_adapter/test_llama_paged_serve.py).
    """
    q, tables, ctx = inputs["pg_q"], inputs["pg_tables"], inputs["pg_context"]
    out = np.zeros(q.shape, np.float64)
    bs = inputs["pg_k_cache"].shape[1]
    for b in range(q.shape[0]):
        n = int(ctx[b])
        k = np.stack([inputs["pg_k_cache"][tables[b, p // bs], p % bs] for p in range(n)])  # [n, KV, D]
        v = np.stack([inputs["pg_v_cache"][tables[b, p // bs], p % bs] for p in range(n)])
        for h in range(q.shape[1]):
            kv = h // (q.shape[1] // k.shape[1])
            s = k[:, kv].astype(np.float64) @ q[b, h] / np.sqrt(q.shape[-1])
            w = np.exp(s - s.max())
            out[b, h] = (w / w.sum()) @ v[:, kv]
    return out.astype(np.float32)


def pad_outputs(outputs: list[list[int]], width: int) -> np.ndarray:
    """Token lists as a [R, width] array, -1 past each list's end."""
    arr = np.full((len(outputs), width), -1, np.int64)
    for i, ids in enumerate(outputs):
        arr[i, : min(len(ids), width)] = ids[:width]
    return arr


def histogram(tokens: list[int], vocab: int) -> np.ndarray:
    counts = np.bincount(np.asarray(tokens, np.int64), minlength=vocab)[:vocab]
    return counts / max(1, counts.sum())


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (base 2) between two probability vectors."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = 0.5 * (p + q)
    kl = lambda a, b: float(np.sum(np.where(a > 0, a * np.log2(np.maximum(a, 1e-300) / np.maximum(b, 1e-300)), 0)))  # noqa: E731
    return float(np.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m))))


def check_greedy_margins(model, config, outputs) -> None:
    """Every greedy choice in the served outputs must win by a clear margin (no near-ties to flip)."""
    import torch
    from paged_serve import kv_cache

    for out in outputs:
        ids = out.prompt_token_ids + out.output_token_ids[:-1]
        cache = kv_cache.PagedKVCache(config, 32, BLOCK_SIZE)
        logits = model.prefill(
            torch.tensor([ids]), torch.tensor([len(ids)]), cache, torch.arange(len(ids))[None]
        )[0, len(out.prompt_token_ids) - 1:]
        top2 = logits.topk(2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        assert margin > 1e-2, f"greedy near-tie in {out.prompt!r}: margin {margin}"


if __name__ == "__main__":
    main()
