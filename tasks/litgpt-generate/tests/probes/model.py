"""litgpt-generate: the GPT's logits, alone and through the KV cache, with parts of it switched off.

The candidate's parameter layout is its own, so parameters come through its `load_checkpoint`.
To see one part of the model at a time, both sides zero the same weights: the MLP's (then a
block is attention alone), attention's output projection (then a block is its MLP alone), or
both (then only the embedding, the final norm and the head remain). The candidate finds those
weights by their values (size, sum and sum of squares), whatever its layout.
"""

PROBES = {
    "head": {
        "uses": ["litgpt.utils.load_checkpoint"],
        "id": "model.head",
        "level": 2,
        "component": "litgpt.model.GPT",
        "description": "Logits with every block switched off: embedding, final RMSNorm, lm_head.",
    },
    "attention": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.GPT"],
        "id": "model.attention",
        "level": 2,
        "component": "litgpt.model.CausalSelfAttention",
        "description": "Logits with the MLPs switched off: the blocks are their causal grouped-query attention.",
    },
    "mlp": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.GPT"],
        "id": "model.mlp",
        "level": 2,
        "component": "litgpt.model.LLaMAMLP",
        "description": "Logits with attention's output switched off: the blocks are their SwiGLU MLP.",
    },
    "forward": {
        "uses": ["litgpt.utils.load_checkpoint"],
        "id": "model.forward",
        "level": 2,
        "component": "litgpt.model.GPT",
        "compare": {"logits": "tensor", "probs": "distributional"},
    },
    "decode": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.KVCache"],
        "id": "model.decode",
        "level": 2,
        "component": "litgpt.model.GPT",
        "description": "Prefill, then teacher-forced single-token steps through the KV cache: logits of every step.",
    },
    "decode_batched": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.batched_index_copy_"],
        "id": "model.decode.batched",
        "level": 2,
        "component": "litgpt.model.GPT",
        "description": "Decode steps at per-row positions ([B, 1] input_pos) through the KV cache.",
    },
}

MLP_WEIGHTS = ("mlp.fc_1.weight", "mlp.fc_2.weight", "mlp.proj.weight")
ATTENTION_OUT = ("attn.proj.weight",)


def _state(env):
    import torch

    return torch.load(env.assets / "lit_model.pth", weights_only=True)


def _zeroed(env, suffixes):
    """Inputs naming the weights to zero by their values (rows: size, sum, sum of squares)."""
    import numpy as np

    rows = [[v.numel(), float(v.double().sum()), float((v.double() ** 2).sum())]
            for k, v in _state(env).items() if k.endswith(suffixes)]  # fmt: skip
    return {"zero": np.array(rows, dtype=np.float64).reshape(-1, 3)}


def _reference_model(env, max_seq_length=None):
    import torch
    from lightning.fabric import Fabric
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import load_checkpoint

    config = Config.from_file(env.assets / "model_config.yaml")
    model = GPT(config)
    path = env.assets / "lit_model.pth"
    zero = env.inputs.get("zero")
    if zero is not None:
        state = _state(env)
        for key, value in state.items():
            if any(value.numel() == int(n) and abs(float(value.double().sum()) - s) < 1e-6 for n, s, _ in zero):
                state[key] = torch.zeros_like(value)
        # The zeroed checkpoint reaches the model as any checkpoint does: through the original's load_checkpoint.
        path = env.scratch / "zeroed.pth"
        torch.save(state, path)
    load_checkpoint(Fabric(accelerator="cpu", devices=1), model, path)
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model.to(getattr(torch, env.dtype)).eval()


def _candidate_model(env):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from litgpt.config import Config
    from litgpt.utils import load_checkpoint

    config = Config.from_file(env.assets / "model_config.yaml")
    params = load_checkpoint(env.assets / "lit_model.pth", config)
    zero = env.inputs.get("zero")

    def named(x):
        a = np.asarray(x, np.float64)
        return any(a.size == int(n) and abs(a.sum() - s) <= 1e-4 * (1 + abs(s)) and abs((a * a).sum() - q) <= 1e-4 * q
                   for n, s, q in zero)  # fmt: skip

    if zero is not None:
        params = jax.tree_util.tree_map(lambda x: jnp.zeros_like(x) if named(x) else x, params)
    return params, config


def _tokens(env, shape):
    return env.rng.integers(0, 100, shape).astype("int32")


def _reference_logits(env):
    import torch

    model = _reference_model(env)
    with torch.inference_mode():
        return {"logits": model(torch.from_numpy(env.inputs["idx"]).long())}


def _candidate_logits(env):
    from litgpt.model import forward

    params, config = _candidate_model(env)
    logits, _ = forward(params, config, env.inputs["idx"])
    return {"logits": logits}


def inputs_head(env):
    return {**_zeroed(env, MLP_WEIGHTS + ATTENTION_OUT), "idx": _tokens(env, (2, 9))}


def reference_head(env):
    return _reference_logits(env)


def candidate_head(env):
    return _candidate_logits(env)


def inputs_attention(env):
    return {**_zeroed(env, MLP_WEIGHTS), "idx": _tokens(env, (2, 13))}


def reference_attention(env):
    return _reference_logits(env)


def candidate_attention(env):
    return _candidate_logits(env)


def inputs_mlp(env):
    return {**_zeroed(env, ATTENTION_OUT), "idx": _tokens(env, (2, 9))}


def reference_mlp(env):
    return _reference_logits(env)


def candidate_mlp(env):
    return _candidate_logits(env)


def inputs_forward(env):
    return {"idx": _tokens(env, (3, 17))}


def reference_forward(env):
    out = _reference_logits(env)
    return {"logits": out["logits"], "probs": out["logits"]}


def candidate_forward(env):
    out = _candidate_logits(env)
    return {"logits": out["logits"], "probs": out["logits"]}


def inputs_decode(env):
    return {"prompt": _tokens(env, (2, 7)), "steps": _tokens(env, (5, 2))}


def reference_decode(env):
    import torch

    model = _reference_model(env, max_seq_length=16)
    model.set_kv_cache(batch_size=2, dtype=getattr(torch, env.dtype))
    prompt = torch.from_numpy(env.inputs["prompt"]).long()
    with torch.inference_mode():
        out = [model(prompt, torch.arange(prompt.shape[1]))[:, -1]]
        for s, tokens in enumerate(env.inputs["steps"]):
            out.append(model(torch.from_numpy(tokens).long()[:, None], torch.tensor([prompt.shape[1] + s]))[:, -1])
    return {"steps": torch.stack(out)}


def candidate_decode(env):
    import numpy as np
    from litgpt.model import forward, init_kv_cache

    params, config = _candidate_model(env)
    prompt = env.inputs["prompt"]
    cache = init_kv_cache(config, 2, 16)
    logits, cache = forward(params, config, prompt, np.arange(prompt.shape[1], dtype="int32"), cache)
    out = [np.asarray(logits)[:, -1]]
    for s, tokens in enumerate(env.inputs["steps"]):
        logits, cache = forward(params, config, tokens[:, None], np.array([prompt.shape[1] + s], "int32"), cache)
        out.append(np.asarray(logits)[:, -1])
    return {"steps": np.stack(out)}


def inputs_decode_batched(env):
    import numpy as np

    return {"prompt": _tokens(env, (2, 5)), "steps": _tokens(env, (4, 2)),
            "positions": np.array([[5, 9], [6, 10], [7, 11], [8, 13]], "int32")}  # fmt: skip


def reference_decode_batched(env):
    import torch

    model = _reference_model(env, max_seq_length=16)
    model.set_kv_cache(batch_size=2, dtype=getattr(torch, env.dtype))
    with torch.inference_mode():
        model(torch.from_numpy(env.inputs["prompt"]).long(), torch.arange(5))
        out = [model(torch.from_numpy(t).long()[:, None], torch.from_numpy(p).long()[:, None])[:, -1]
               for t, p in zip(env.inputs["steps"], env.inputs["positions"], strict=True)]  # fmt: skip
    return {"steps": torch.stack(out)}


def candidate_decode_batched(env):
    import numpy as np
    from litgpt.model import forward, init_kv_cache

    params, config = _candidate_model(env)
    cache = init_kv_cache(config, 2, 16)
    _, cache = forward(params, config, env.inputs["prompt"], np.arange(5, dtype="int32"), cache)
    out = []
    for tokens, positions in zip(env.inputs["steps"], env.inputs["positions"], strict=True):
        logits, cache = forward(params, config, tokens[:, None], positions[:, None], cache)
        out.append(np.asarray(logits)[:, -1])
    return {"steps": np.stack(out)}
