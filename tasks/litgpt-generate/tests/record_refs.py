"""Record the frozen references of the litgpt-generate grader from the PyTorch original.

Task authors run this (with torch and litgpt's runtime dependencies) after any change to the
original or its assets:

    LITGPT_SOURCE=<the laid-out original> python tests/record_refs.py

(`twin task fetch tasks/litgpt-generate` prints where the original is laid out.) It writes
`tests/inputs.npz` and `tests/inputs.json` (the fixed inputs the grader feeds the candidate),
`tests/refs/refs.npz` (the original's float32 outputs), `tests/refs/meta.json` (per output, the
largest difference between the original run in float32 and in float64: the reference's own
noise, from which the grader's tolerances come; the sampling bands, measured as the original
sampler's own spread over seeds) and `tests/refs/VERSIONS.json`.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
ASSETS = TESTS.parent / "environment" / "assets"
DECODE_STEPS = 12
GREEDY = [  # prompt, max_returned_tokens; eos_id is chosen below so that one request stops early
    ([5, 17, 33, 2, 90, 41, 7], 30), ([64, 3, 3, 12], 24), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 40),
    ([99], 20), ([42, 8, 77, 15, 23], 36),
]  # fmt: skip
SAMPLER_N, BAND_RUNS = 2048, 100
GEN_PROMPT, GEN_PARAMS, GEN_N = [11, 52, 7, 30, 64, 2], {"temperature": 0.8, "top_k": 20, "top_p": 0.9}, 192
SEED_PROMPT, SEED_PARAMS, SEED_KEYS = [9, 81, 27], {"temperature": 1.0, "top_k": None, "top_p": 1.0}, [7, 7, 8, 9]


def sampler_rows(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, list[dict]]:
    """Logit rows and settings that separate the sampler's transforms, their order and its tie rules."""
    rows, settings = [], []

    def add(logits, temperature, top_k, top_p):
        rows.append(np.asarray(logits, np.float32))
        settings.append({"temperature": temperature, "top_k": top_k, "top_p": top_p})

    add(2.0 * rng.normal(size=vocab), 0.7, 10, 0.9)
    add(2.0 * rng.normal(size=vocab), 1.3, None, 0.8)
    add(3.0 * rng.normal(size=vocab), 0.5, 5, 1.0)
    add(1.0 * rng.normal(size=vocab), 1.0, None, 0.5)
    add(4.0 * rng.normal(size=vocab), 0.3, None, 0.7)  # top-p after temperature keeps far fewer tokens
    add(4.0 * rng.normal(size=vocab), 2.5, 20, 0.6)  # top-p over the top-k survivors, not the whole row
    add(1.5 * rng.normal(size=vocab), 1.0, 40, 0.95)
    tie = np.full(vocab, -2.0)
    tie[[3, 7, 11, 19, 23, 40]] = [5.0, 4.0, 3.0, 3.0, 3.0, 2.0]
    add(tie, 1.0, 3, 1.0)  # a tie at the k-th value: which of them is kept is the library's choice
    flat = np.full(vocab, -1e9)
    flat[[10, 20, 30, 40]] = 0.0
    add(flat, 1.0, None, 0.5)  # cumulative mass hits 1 - p exactly: dropped inclusively
    add(2.0 * rng.normal(size=vocab), 0.0, 4, 0.5)  # greedy: temperature 0
    add(2.0 * rng.normal(size=vocab), 0.9, None, 0.0)  # greedy: top_p 0
    return np.stack(rows), settings


def tie_classes(logits: np.ndarray) -> np.ndarray:
    """Per token, the index of its class of equal logits (the tie-robust unit of a distribution)."""
    return np.unique(logits, return_inverse=True)[1].reshape(-1)


def class_mass(probs: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return np.bincount(classes, weights=probs, minlength=int(classes.max()) + 1)


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (base 2) between two probability vectors."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = 0.5 * (p + q)
    kl = lambda a, b: float(np.sum(np.where(a > 0, a * np.log2(np.maximum(a, 1e-300) / np.maximum(b, 1e-300)), 0)))  # noqa: E731
    return float(np.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m))))


def sampling_band(probs: np.ndarray, classes: np.ndarray, n: int, seed: int) -> float:
    """The largest tie-class JS distance of n draws of the original's sampler from its own distribution.

    Stand-in: the draws are `torch.multinomial`, n at a time, which is the draw litgpt's
    `multinomial_num_samples_1` makes one at a time (tested: seed for seed, the same tokens), since
    litgpt draws only one token per call.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    want = class_mass(probs, classes)
    worst = 0.0
    for _ in range(BAND_RUNS):
        drawn = torch.multinomial(torch.from_numpy(probs.astype(np.float64)), n, replacement=True, generator=generator)
        hist = np.bincount(drawn.numpy(), minlength=probs.size) / n
        worst = max(worst, js_distance(class_mass(hist, classes), want))
    return worst


def main() -> None:
    sys.path.insert(0, os.environ["LITGPT_SOURCE"])
    import litgpt.generate.base as base
    import torch
    from litgpt.config import Config
    from litgpt.model import GPT, KVCache, RMSNorm, apply_rope, build_rope_cache

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.default_rng(2025)
    t = torch.from_numpy
    config = Config.from_file(ASSETS / "model_config.yaml")
    state = torch.load(ASSETS / "lit_model.pth", weights_only=True)
    models = {}
    for dtype in (torch.float32, torch.float64):
        model = GPT(config)
        model.load_state_dict(state)
        models[dtype] = model.to(dtype).eval()
    inputs: dict[str, np.ndarray] = {}
    outs: dict[torch.dtype, dict[str, np.ndarray]] = {torch.float32: {}, torch.float64: {}}

    def both(name, fn):
        """Run `fn(dtype, model)` in float32 and float64; keep both results under `name`."""
        for dtype, model in models.items():
            with torch.inference_mode():
                outs[dtype][name] = np.asarray(fn(dtype, model), np.float64)

    # L1: modules on fixed inputs
    cos, sin = build_rope_cache(config.block_size, config.rope_n_elem, base=config.rope_base)
    outs[torch.float32]["rope_cos"], outs[torch.float32]["rope_sin"] = cos.numpy(), sin.numpy()
    # Stand-in: build_rope_cache computes in float32 whatever the model's dtype, so the tables' noise
    # run is its formula in float64 here (tested: litgpt's tables are these rounded, within a float32
    # step of the largest angle; tests/benchmark_adapter/test_litgpt_generate.py)
    angles = np.outer(np.arange(config.block_size, dtype=np.float64),
                      1.0 / config.rope_base ** (np.arange(0, config.rope_n_elem, 2) / config.rope_n_elem))  # fmt: skip
    outs[torch.float64]["rope_cos"] = np.cos(np.tile(angles, 2))
    outs[torch.float64]["rope_sin"] = np.sin(np.tile(angles, 2))
    inputs["rope_x"] = rng.normal(size=(2, 4, 9, 16)).astype(np.float32)
    inputs["rope_pos"] = np.stack([np.arange(9), 40 + 2 * np.arange(9)]).astype(np.int64)
    both("rope_1d", lambda d, m: apply_rope(t(inputs["rope_x"]).to(d), m.cos[t(inputs["rope_pos"][0])][None].to(d),
                                            m.sin[t(inputs["rope_pos"][0])][None].to(d)))  # fmt: skip
    both("rope_2d", lambda d, m: apply_rope(t(inputs["rope_x"]).to(d), m.cos[t(inputs["rope_pos"])].to(d),
                                            m.sin[t(inputs["rope_pos"])].to(d)))  # fmt: skip
    inputs["rms_x"] = rng.normal(size=(3, 5, 64)).astype(np.float32)
    inputs["rms_x_small"] = (1e-3 * rng.normal(size=(4, 64))).astype(np.float32)
    inputs["rms_w"] = (1.0 + 0.3 * rng.normal(size=64)).astype(np.float32)

    def rms(x):
        def run(dtype, _model):
            norm = RMSNorm(64, eps=config.norm_eps).to(dtype)
            norm.weight.data = t(inputs["rms_w"]).to(dtype)
            return norm(t(x).to(dtype))
        return run

    both("rms", rms(inputs["rms_x"]))
    both("rms_small", rms(inputs["rms_x_small"]))
    for case, pos in (("1d", np.array([3, 4, 5], np.int64)), ("2d", np.array([[0, 9, 2], [15, 1, 7]], np.int64))):
        inputs[f"kv_{case}_k0"] = rng.normal(size=(2, 2, 16, 16)).astype(np.float32)
        inputs[f"kv_{case}_v0"] = rng.normal(size=(2, 2, 16, 16)).astype(np.float32)
        inputs[f"kv_{case}_k"] = rng.normal(size=(2, 2, 3, 16)).astype(np.float32)
        inputs[f"kv_{case}_v"] = rng.normal(size=(2, 2, 3, 16)).astype(np.float32)
        inputs[f"kv_{case}_pos"] = pos

        def write(dtype, _model, case=case):
            cache = KVCache((2, 2, 16, 16), (2, 2, 16, 16), dtype=dtype)
            cache.k.copy_(t(inputs[f"kv_{case}_k0"])), cache.v.copy_(t(inputs[f"kv_{case}_v0"]))
            k, v = cache(t(inputs[f"kv_{case}_pos"]), t(inputs[f"kv_{case}_k"]).to(dtype),
                         t(inputs[f"kv_{case}_v"]).to(dtype))  # fmt: skip
            return torch.stack([k, v])

        both(f"kv_{case}", write)

    # L2: forward without a cache, over two shapes
    for name, shape in (("fwd_a", (2, 11)), ("fwd_b", (1, 40))):
        inputs[name] = rng.integers(0, config.vocab_size, size=shape).astype(np.int64)
        both(name, lambda d, m, name=name: m(t(inputs[name])))

    # L2: prefill, then teacher-forced step-wise decode through the cache (positions shared by the batch)
    inputs["dec_prompt"] = rng.integers(0, config.vocab_size, size=(2, 9)).astype(np.int64)
    forced = [models[torch.float32]]

    def decode(dtype, model, max_len=32):
        model.max_seq_length = max_len
        model.set_kv_cache(batch_size=2, dtype=dtype)
        prompt = t(inputs["dec_prompt"])
        logits = model(prompt, torch.arange(prompt.shape[1]))
        steps = [logits[:, -1]]
        for s in range(DECODE_STEPS):
            token = t(inputs["dec_tokens"][s])[:, None] if "dec_tokens" in inputs else steps[-1].argmax(-1)[:, None]
            if model is forced[0] and "dec_tokens" not in inputs:
                forced.append(token[:, 0].numpy())
            pos = prompt.shape[1] + s
            steps.append(model(token, torch.tensor([pos]))[:, -1])
        cache = torch.stack([torch.stack([b.attn.kv_cache.k, b.attn.kv_cache.v]) for b in model.transformer.h])
        model.clear_kv_cache()
        return torch.cat([torch.stack(steps).flatten(), cache[..., : prompt.shape[1] + DECODE_STEPS, :].flatten()])

    with torch.inference_mode():
        decode(torch.float32, models[torch.float32])  # the greedy tokens that are fed back, from float32
    inputs["dec_tokens"] = np.stack(forced[1:]).astype(np.int64)
    both("decode", decode)
    n_logits = (DECODE_STEPS + 1) * 2 * config.padded_vocab_size
    for dtype in outs:
        flat = outs[dtype].pop("decode")
        outs[dtype]["dec_logits"] = flat[:n_logits].reshape(DECODE_STEPS + 1, 2, -1)
        outs[dtype]["dec_cache"] = flat[n_logits:].reshape(
            config.n_layer, 2, 2, config.n_query_groups, -1, config.head_size)

    # L2: batched positions: after a shared prefill, each row decodes at its own positions (row 1 skips some)
    inputs["bp_prompt"] = rng.integers(0, config.vocab_size, size=(2, 6)).astype(np.int64)
    inputs["bp_tokens"] = rng.integers(0, config.vocab_size, size=(6, 2)).astype(np.int64)
    inputs["bp_pos"] = np.stack([6 + np.arange(6), 10 + 2 * np.arange(6)], axis=1).astype(np.int64)  # [S, B]

    def batched(dtype, model):
        model.max_seq_length = 24
        model.set_kv_cache(batch_size=2, dtype=dtype)
        model(t(inputs["bp_prompt"]), torch.arange(6))
        steps = [model(t(inputs["bp_tokens"][s])[:, None], t(inputs["bp_pos"][s])[:, None])[:, -1] for s in range(6)]
        model.clear_kv_cache()
        return torch.stack(steps)

    both("bp_logits", batched)

    # L3: greedy generation (the original's `generate`, temperature 0), eos chosen to stop one request early
    model = models[torch.float32]
    runs = []
    with torch.inference_mode():
        for prompt, max_tokens in GREEDY:
            model.max_seq_length = max_tokens
            model.set_kv_cache(batch_size=1)
            runs.append(base.generate(model, torch.tensor(prompt), max_tokens, temperature=0.0).tolist())
        first_new = runs[0][len(GREEDY[0][0]):]
        eos_id = next(tok for i, tok in enumerate(first_new) if i >= 4 and tok not in first_new[:i])
        greedy = []
        for prompt, max_tokens in GREEDY:
            model.max_seq_length = max_tokens
            model.set_kv_cache(batch_size=1)
            greedy.append(
                base.generate(model, torch.tensor(prompt), max_tokens, temperature=0.0, eos_id=eos_id).tolist())
            check_margin(model, greedy[-1], len(prompt))
    assert any(len(g) < m for g, (_, m) in zip(greedy, GREEDY, strict=False)), "no request stops at eos"
    width = max(m for _, m in GREEDY)
    refs32 = outs[torch.float32]
    refs32["greedy"] = np.array([g + [-1] * (width - len(g)) for g in greedy], np.float64)

    # L4: the sampler's distributions, captured from the original's own `sample`
    captured = []
    original_draw = base.multinomial_num_samples_1
    base.multinomial_num_samples_1 = (
        lambda probs: captured.append(probs.double().numpy().copy()) or original_draw(probs))
    logits_rows, settings = sampler_rows(rng, config.padded_vocab_size)
    probs, bands = [], []
    for i, (row, kwargs) in enumerate(zip(logits_rows, settings, strict=False)):
        captured.clear()
        token = base.sample(t(row)[None, None], **kwargs)
        if captured:
            p = captured[0]
        else:  # a greedy row: the whole mass on the token it returns
            p = np.zeros(row.size)
            p[int(token)] = 1.0
        probs.append(p)
        bands.append(sampling_band(p, tie_classes(row), SAMPLER_N, seed=100 + i))
    inputs["sp_logits"] = logits_rows
    refs32["sp_probs"] = np.stack(probs)
    with torch.inference_mode():
        model.max_seq_length = len(GEN_PROMPT) + 1
        model.set_kv_cache(batch_size=1)
        captured.clear()
        base.generate(model, torch.tensor(GEN_PROMPT), len(GEN_PROMPT) + 1, **GEN_PARAMS)
        gen_logits = model(torch.tensor([GEN_PROMPT]))[0, -1].double().numpy()
    base.multinomial_num_samples_1 = original_draw
    refs32["gen_probs"] = captured[0]
    gen_band = sampling_band(captured[0], tie_classes(gen_logits), GEN_N, seed=999)
    refs32["gen_classes"] = tie_classes(gen_logits).astype(np.float64)

    noise = {k: float(np.max(np.abs(outs[torch.float32][k] - outs[torch.float64][k]))) for k in outs[torch.float64]}
    np.savez(TESTS / "inputs.npz", **inputs)
    (TESTS / "inputs.json").write_text(json.dumps({
        "decode_steps": DECODE_STEPS, "dec_cache_len": 32, "bp_cache_len": 24,
        "greedy": [{"prompt": p, "max_returned_tokens": m} for p, m in GREEDY], "eos_id": int(eos_id),
        "sampler_settings": settings, "sampler_n": SAMPLER_N,
        "gen_prompt": GEN_PROMPT, "gen_params": GEN_PARAMS, "gen_n": GEN_N,
        "seed_prompt": SEED_PROMPT, "seed_params": SEED_PARAMS, "seed_keys": SEED_KEYS, "seed_tokens": 12,
    }, indent=1) + "\n")  # fmt: skip
    np.savez(TESTS / "refs" / "refs.npz", param_count=np.array(sum(v.numel() for v in state.values())),
             param_tensors=np.array(len(state)), **{k: v.astype(np.float32) for k, v in refs32.items()})  # fmt: skip
    meta = {"noise": noise, "sampler_bands": bands, "gen_band": gen_band, "band_runs": BAND_RUNS}
    (TESTS / "refs" / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    (TESTS / "refs" / "VERSIONS.json").write_text(json.dumps({
        "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "threads": 1, "litgpt": "0.5.13",
    }, indent=1) + "\n")  # fmt: skip
    print(json.dumps(meta, indent=1))


def check_margin(model, tokens: list[int], prompt_len: int) -> None:
    """Every greedy choice must win by a clear margin (no near-tie for float noise to flip)."""
    import torch

    model.clear_kv_cache()
    logits = model(torch.tensor([tokens]))[0, prompt_len - 1 : len(tokens) - 1]
    top2 = logits.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    assert margin > 1e-2, f"greedy near-tie after {tokens[:prompt_len]}: margin {margin}"


if __name__ == "__main__":
    main()
