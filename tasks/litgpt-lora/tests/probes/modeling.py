"""litgpt-lora: the base GPT from its leaves up (RMSNorm, RoPE tables and rotation, attention, MLP, logits).

The reference side reads the checkpoint with torch and hands it to both sides as inputs, so no
probe here depends on the candidate's checkpoint reader. Attention and the MLP are probed
through the public forward of a one-layer model in which the other branch is zeroed: with the
MLP's output projection zero a block is `x + attention(norm_1(x))`, and with the attention's
output projection zero it is `x + mlp(norm_2(x))`.
"""

PROBES = {
    "rms_norm": {"id": "model.rms_norm", "level": 1, "component": "litgpt.model.RMSNorm"},
    "rope_cache": {"id": "model.rope_cache", "level": 1, "component": "litgpt.model.build_rope_cache"},
    "apply_rope": {"id": "model.apply_rope", "level": 1, "component": "litgpt.model.apply_rope"},
    "attention": {
        "id": "model.attention",
        "level": 2,
        "component": "litgpt.model.CausalSelfAttention",
        "uses": ["litgpt.model.RMSNorm", "litgpt.model.build_rope_cache", "litgpt.model.apply_rope"],
        "description": "One block whose MLP output is zero: embedding, norm_1, attention, residual, ln_f, lm_head.",
    },
    "mlp": {
        "id": "model.mlp",
        "level": 2,
        "component": "litgpt.model.LLaMAMLP",
        "uses": ["litgpt.model.RMSNorm"],
        "description": "One block whose attention output is zero: the SwiGLU MLP and its norm.",
    },
    "forward": {
        "id": "model.logits",
        "level": 3,
        "component": "litgpt.model.GPT",
        "uses": ["litgpt.model.CausalSelfAttention", "litgpt.model.LLaMAMLP", "litgpt.model.Block"],
        "compare": {"logits": "tensor", "probs": "distributional"},
    },
}


def _config_values(env):
    import yaml

    return yaml.safe_load((env.assets / "model_config.yaml").read_text())


def _checkpoint(env):
    import torch

    return {k: v.numpy() for k, v in torch.load(env.assets / "lit_model.pth", weights_only=True).items()}


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def inputs_rms_norm(env):
    return {"x": (3.0 * env.rng.standard_normal((2, 5, 48))).astype("float32"),
            "w": env.rng.uniform(0.5, 1.5, 48).astype("float32")}  # fmt: skip


def reference_rms_norm(env):
    import torch
    from litgpt.model import RMSNorm

    norm = RMSNorm(48, eps=1e-5).to(getattr(torch, env.dtype))
    norm.weight.data = _t(env, env.inputs["w"])
    return {"y": norm(_t(env, env.inputs["x"]))}


def candidate_rms_norm(env):
    from litgpt.model import rms_norm

    return {"y": rms_norm(env.inputs["x"], env.inputs["w"], 1e-5)}


def reference_rope_cache(env):
    from litgpt.model import build_rope_cache

    cos, sin = build_rope_cache(13, 12, base=10000)
    cos2, sin2 = build_rope_cache(7, 8, base=500)
    return {"cos": cos, "sin": sin, "cos_500": cos2, "sin_500": sin2}


def candidate_rope_cache(env):
    from litgpt.model import build_rope_cache

    cos, sin = build_rope_cache(13, 12, 10000)
    cos2, sin2 = build_rope_cache(7, 8, 500)
    return {"cos": cos, "sin": sin, "cos_500": cos2, "sin_500": sin2}


def inputs_apply_rope(env):
    import numpy as np

    angles = env.rng.uniform(-3, 3, (6, 4))
    full = np.concatenate([angles, angles], -1)
    return {"x": env.rng.standard_normal((2, 3, 6, 8)).astype("float32"),
            "cos": np.cos(full).astype("float32"), "sin": np.sin(full).astype("float32")}  # fmt: skip


def reference_apply_rope(env):
    from litgpt.model import apply_rope

    cos, sin = _t(env, env.inputs["cos"]).unsqueeze(0), _t(env, env.inputs["sin"]).unsqueeze(0)
    return {"y": apply_rope(_t(env, env.inputs["x"]), cos, sin)}


def candidate_apply_rope(env):
    from litgpt.model import apply_rope

    return {"y": apply_rope(env.inputs["x"], env.inputs["cos"], env.inputs["sin"])}


def _one_layer_inputs(env, zeroed):
    """Layer 0 of the checkpoint as a one-layer model, with `zeroed` (a weight name) set to zero."""
    import numpy as np

    state = {k: v for k, v in _checkpoint(env).items() if ".h." not in k or ".h.0." in k}
    state[zeroed] = np.zeros_like(state[zeroed])
    ids = env.rng.integers(0, 80, size=(2, 11)).astype("int64")
    return {"ids": ids, **{f"sd.{k}": v for k, v in state.items()}}


def _reference_logits(env, n_layer):
    import torch
    from litgpt.config import Config
    from litgpt.model import GPT

    model = GPT(Config(**{**_config_values(env), "n_layer": n_layer}))
    model.load_state_dict({k[3:]: torch.from_numpy(v) for k, v in env.inputs.items() if k.startswith("sd.")})
    model = model.to(getattr(torch, env.dtype))
    with torch.no_grad():
        logits = model(torch.from_numpy(env.inputs["ids"]))
    return {"logits": logits, "probs": logits}


def _candidate_logits(env, n_layer):
    from litgpt.config import Config
    from litgpt.model import gpt_forward
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict

    config = Config.from_file(env.assets / "model_config.yaml", n_layer=n_layer)
    params = params_from_state_dict({k[3:]: v for k, v in env.inputs.items() if k.startswith("sd.")}, config)
    logits = gpt_forward(params, config, env.inputs["ids"])
    return {"logits": logits, "probs": logits}


def inputs_attention(env):
    return _one_layer_inputs(env, "transformer.h.0.mlp.proj.weight")


def reference_attention(env):
    return _reference_logits(env, 1)


def candidate_attention(env):
    return _candidate_logits(env, 1)


def inputs_mlp(env):
    return _one_layer_inputs(env, "transformer.h.0.attn.proj.weight")


def reference_mlp(env):
    return _reference_logits(env, 1)


def candidate_mlp(env):
    return _candidate_logits(env, 1)


def inputs_forward(env):
    ids = env.rng.integers(0, 80, size=(3, 17)).astype("int64")
    return {"ids": ids, **{f"sd.{k}": v for k, v in _checkpoint(env).items()}}


def reference_forward(env):
    return _reference_logits(env, _config_values(env)["n_layer"])


def candidate_forward(env):
    import yaml

    return _candidate_logits(env, yaml.safe_load((env.assets / "model_config.yaml").read_text())["n_layer"])
