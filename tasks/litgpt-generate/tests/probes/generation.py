"""litgpt-generate: the sampler's transforms and their order, its draw, and the generation loop.

The sampler is random on both sides, and torch's draws have no counterpart in JAX's keys, so
each side draws many tokens and reports, per logit row, whether the tokens' histogram lies
within the original's own sampling spread of the distribution the original samples from
(recorded here, from the original's `sample`, before its draw). Tokens of equal logits form
one class (which member of a tie a library keeps is its own choice). Greedy generation is
compared token for token.
"""

PROBES = {
    "sample": {
        "id": "generate.sample",
        "level": 1,
        "component": "litgpt.generate.base.sample",
        "description": "Top-k, then temperature, then top-p: each row's draws follow the original's distribution.",
    },
    "top_p": {
        "id": "generate.sample_top_p",
        "level": 1,
        "component": "litgpt.generate.base.sample_top_p",
        "description": "Which tokens sample_top_p keeps, and their logits.",
    },
    "multinomial": {
        "id": "generate.multinomial",
        "level": 1,
        "component": "litgpt.generate.base.multinomial_num_samples_1",
        "description": "Draws from given probabilities follow them (the candidate's draw takes a key).",
    },
    "generate_fn": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.GPT"],
        "id": "generate.generate_fn",
        "level": 3,
        "component": "litgpt.generate.base.generate_fn",
        "description": "Greedy tokens of generate_fn to max_returned_tokens, and with a stop token (included).",
    },
    "generate": {
        "uses": ["litgpt.utils.load_checkpoint", "litgpt.model.GPT"],
        "id": "generate.generate",
        "level": 3,
        "component": "litgpt.generate.base.generate",
        "description": "Greedy generate with and without eos_id: prompt, tokens and the eos token.",
    },
}

DRAWS, RUNS = 8192, 200
SETTINGS = [
    {"temperature": 0.7, "top_k": 10, "top_p": 0.9},
    {"temperature": 0.4, "top_k": None, "top_p": 0.8},
    {"temperature": 2.0, "top_k": 12, "top_p": 0.7},
    {"temperature": 0.5, "top_k": 5, "top_p": 1.0},
    {"temperature": 1.0, "top_k": 3, "top_p": 1.0},
    {"temperature": 0.0, "top_k": 4, "top_p": 0.5},
]


def _classes(logits):
    import numpy as np

    return np.unique(np.asarray(logits, np.float32), return_inverse=True)[1].reshape(-1)


def _js(p, q):
    import numpy as np

    m = 0.5 * (p + q)

    def kl(a, b):
        return float(np.sum(np.where(a > 0, a * np.log2(np.maximum(a, 1e-300) / np.maximum(b, 1e-300)), 0.0)))

    return float(np.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m))))


def _within(draws, probs, classes, band):
    """Whether the tie-class histogram of `draws` is within `band` (JS distance) of `probs`."""
    import numpy as np

    draws = np.asarray(draws, np.int64).reshape(-1)
    if draws.min() < 0 or draws.max() >= probs.size:
        return False
    size = int(classes.max()) + 1
    hist = np.bincount(classes[draws], minlength=size) / draws.size
    return _js(hist, np.bincount(classes, probs, size)) <= band


def _band(env, probs, classes):
    """The original's own spread: 1.5 x the largest distance of RUNS histograms of DRAWS draws from `probs`."""
    import numpy as np

    size = int(classes.max()) + 1
    want = np.bincount(classes, probs, size)
    worst = max(_js(np.bincount(classes, env.rng.multinomial(DRAWS, probs), size) / DRAWS, want) for _ in range(RUNS))
    return 1.5 * worst


def inputs_sample(env):
    import litgpt.generate.base as base
    import numpy as np
    import torch

    rows = np.stack([(1.0 + i) * env.rng.standard_normal(128) for i in range(len(SETTINGS))]).astype("float32")
    rows[4, [3, 7, 9]] = rows[4].max() + 1.0  # a three-way tie at the top; top_k 3 keeps it whole
    captured, draw = [], base.multinomial_num_samples_1
    base.multinomial_num_samples_1 = lambda probs: captured.append(probs.double().numpy()) or draw(probs)
    try:
        probs = []
        for row, kwargs in zip(rows, SETTINGS, strict=True):
            captured.clear()
            token = base.sample(torch.from_numpy(row)[None, None], **kwargs)
            p = captured[0] if captured else np.eye(row.size)[int(token)]
            probs.append(p / p.sum())
    finally:
        base.multinomial_num_samples_1 = draw
    probs = np.stack(probs)
    bands = np.array([_band(env, p, _classes(r)) for p, r in zip(probs, rows, strict=True)])
    return {"logits": rows, "probs": probs, "bands": bands}


def reference_sample(env):
    import litgpt.generate.base as base
    import torch

    i, within = env.inputs, {}
    for n, (row, kwargs) in enumerate(zip(i["logits"], SETTINGS, strict=True)):
        drawn, draw = [], base.multinomial_num_samples_1

        def keep(probs, drawn=drawn, draw=draw):
            return drawn.append(torch.multinomial(probs, DRAWS, True)) or draw(probs)

        base.multinomial_num_samples_1 = keep
        try:
            token = base.sample(torch.from_numpy(row)[None, None], **kwargs)
        finally:
            base.multinomial_num_samples_1 = draw
        draws = drawn[0].numpy() if drawn else [int(token)] * DRAWS
        within[f"row{n}"] = _within(draws, i["probs"][n], _classes(row), i["bands"][n])
    return within


def candidate_sample(env):
    import jax
    import numpy as np
    from litgpt.generate.base import sample

    i, within = env.inputs, {}
    keys = jax.random.split(jax.random.PRNGKey(env.seed), DRAWS)
    for n, (row, kwargs) in enumerate(zip(i["logits"], SETTINGS, strict=True)):
        draws = jax.vmap(lambda key, row=row, kwargs=kwargs: sample(row[None, None], key=key, **kwargs))(keys)
        within[f"row{n}"] = _within(np.asarray(draws), i["probs"][n], _classes(row), i["bands"][n])
    return within


def inputs_top_p(env):
    return {"logits": (2.0 * env.rng.standard_normal((4, 128))).astype("float32"), "top_p": [0.9, 0.5, 0.2, 0.97]}


def reference_top_p(env):
    import torch
    from litgpt.generate.base import sample_top_p

    out = [sample_top_p(torch.from_numpy(r).to(getattr(torch, env.dtype)), p)
           for r, p in zip(env.inputs["logits"], env.inputs["top_p"], strict=True)]  # fmt: skip
    kept = torch.stack([torch.isfinite(o) for o in out]).numpy()
    return {"kept": kept, "values": [o[torch.isfinite(o)] for o in out]}


def candidate_top_p(env):
    import numpy as np
    from litgpt.generate.base import sample_top_p

    out = [np.asarray(sample_top_p(r, p)) for r, p in zip(env.inputs["logits"], env.inputs["top_p"], strict=True)]
    return {"kept": np.stack([np.isfinite(o) for o in out]), "values": [o[np.isfinite(o)] for o in out]}


def inputs_multinomial(env):
    import numpy as np

    probs = env.rng.dirichlet(np.full(32, 0.5))
    return {"probs": probs, "band": _band(env, probs, np.arange(32))}


def reference_multinomial(env):
    import litgpt.generate.base as base
    import numpy as np
    import torch

    # The original's own draw, once per row of DRAWS copies of the distribution: one token each.
    probs = torch.from_numpy(env.inputs["probs"])[None].expand(DRAWS, -1)
    draws = base.multinomial_num_samples_1(probs).numpy()
    return {"within": _within(draws, env.inputs["probs"], np.arange(32), env.inputs["band"])}


def candidate_multinomial(env):
    import jax
    import numpy as np
    from litgpt.generate.base import multinomial_num_samples_1

    probs = np.asarray(env.inputs["probs"], np.float32)
    keys = jax.random.split(jax.random.PRNGKey(env.seed), DRAWS)
    draws = jax.vmap(lambda key: multinomial_num_samples_1(probs, key))(keys)
    return {"within": _within(np.asarray(draws), env.inputs["probs"], np.arange(32), env.inputs["band"])}


def _reference(env, max_tokens):
    import torch
    from lightning.fabric import Fabric
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import load_checkpoint

    model = GPT(Config.from_file(env.assets / "model_config.yaml"))
    load_checkpoint(Fabric(accelerator="cpu", devices=1), model, env.assets / "lit_model.pth")
    model = model.to(getattr(torch, env.dtype)).eval()
    model.max_seq_length = max_tokens
    model.set_kv_cache(batch_size=1, dtype=getattr(torch, env.dtype))
    return model


def _candidate(env):
    from litgpt.config import Config
    from litgpt.utils import load_checkpoint

    config = Config.from_file(env.assets / "model_config.yaml")
    return load_checkpoint(env.assets / "lit_model.pth", config), config


def inputs_generate_fn(env):
    return {"prompt": [5, 17, 33, 2, 90, 41, 7], "max_tokens": 24, "stop": 21}


def reference_generate_fn(env):
    import torch
    from litgpt.generate.base import generate_fn

    i, out = env.inputs, {}
    for name, stop in (("plain", ()), ("stop", ([i["stop"]],))):
        model = _reference(env, i["max_tokens"])
        tokens = generate_fn(model, torch.tensor(i["prompt"]), i["max_tokens"], temperature=0.0,
                             stop_tokens=stop, include_prompt=False, include_eos=True)  # fmt: skip
        out[name] = [int(t) for t in tokens]
    return out


def candidate_generate_fn(env):
    import numpy as np
    from litgpt.generate.base import generate_fn

    i, out = env.inputs, {}
    params, config = _candidate(env)
    for name, stop in (("plain", ()), ("stop", ([i["stop"]],))):
        prompt = np.array(i["prompt"], "int32")
        tokens = generate_fn(params, config, prompt, i["max_tokens"], temperature=0.0, top_k=None, top_p=1.0,
                             stop_tokens=stop, include_prompt=False, include_eos=True)  # fmt: skip
        out[name] = [int(t) for x in tokens for t in np.asarray(x).reshape(-1)]
    return out


def inputs_generate(env):
    return {"prompt": [64, 3, 3, 12], "max_tokens": 20, "eos": 82}  # greedy reaches 82 after 2 other tokens


def reference_generate(env):
    import torch
    from litgpt.generate.base import generate

    i, out = env.inputs, {}
    for name, eos in (("plain", None), ("eos", i["eos"])):
        model = _reference(env, i["max_tokens"])
        tokens = generate(model, torch.tensor(i["prompt"]), i["max_tokens"], temperature=0.0, eos_id=eos)
        out[name] = [int(t) for t in tokens]
    return out


def candidate_generate(env):
    import numpy as np
    from litgpt.generate.base import generate

    i, out = env.inputs, {}
    params, config = _candidate(env)
    for name, eos in (("plain", None), ("eos", i["eos"])):
        tokens = generate(params, config, np.array(i["prompt"], "int32"), i["max_tokens"], temperature=0.0, eos_id=eos)
        out[name] = [int(t) for t in np.asarray(tokens).reshape(-1)]
    return out
