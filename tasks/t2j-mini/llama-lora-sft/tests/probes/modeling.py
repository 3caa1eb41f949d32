"""llama-lora-sft: the decoder from the leaves up (norm, rotary, repeat_kv, LoRA linear, attention, MLP, forward).

Parameters follow the layout the instruction documents: base params with `[in, out]`
kernels, adapters `{"layers": [{target: {"a": [in, rank], "b": [rank, out]}}]}`. The
probes build both from the raw checkpoint and from adapters drawn here, so they do
not depend on the candidate's checkpoint code.
"""

PROBES = {
    "norm": {"id": "forward.rms_norm", "level": 1, "component": "llama_sft.modeling.norm.RMSNorm"},
    "rope": {
        "id": "forward.rope_tables",
        "level": 1,
        "component": "llama_sft.modeling.rotary.rope_cos_sin",
    },
    "rotate_half": {
        "id": "forward.rotate_half",
        "level": 1,
        "component": "llama_sft.modeling.rotary.rotate_half",
        "description": "rotate_half (the original's helper, where the candidate keeps it): [-x2, x1] by halves.",
    },
    "rotary": {
        "id": "forward.apply_rotary",
        "level": 1,
        "component": "llama_sft.modeling.rotary.apply_rotary",
    },
    "repeat_kv": {
        "id": "forward.repeat_kv",
        "level": 1,
        "component": "llama_sft.modeling.attention.repeat_kv",
    },
    "lora_linear": {
        "id": "forward.lora_linear",
        "level": 1,
        "component": "llama_sft.lora.LoRALinear",
    },
    "attention": {
        "id": "forward.attention",
        "level": 2,
        "component": "llama_sft.modeling.attention.Attention",
    },
    "mlp": {"id": "forward.swiglu", "level": 2, "component": "llama_sft.modeling.mlp.SwiGLU"},
    "forward": {
        "id": "forward.logits",
        "level": 2,
        "component": "llama_sft.modeling.llama.LlamaForCausalLM",
        "compare": {"logits": "tensor", "probs": "distributional"},
    },
}

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RAW_BLOCK = {
    "attn_norm": "input_layernorm.weight",
    "mlp_norm": "post_attention_layernorm.weight",
    "q_proj": "self_attn.q_proj.weight",
    "k_proj": "self_attn.k_proj.weight",
    "v_proj": "self_attn.v_proj.weight",
    "o_proj": "self_attn.o_proj.weight",
    "gate_proj": "mlp.gate_proj.weight",
    "up_proj": "mlp.up_proj.weight",
    "down_proj": "mlp.down_proj.weight",
}


def _cfgs(env):
    from llama_sft.config import TrainConfig, load_model_config

    return load_model_config(env.assets / "config.json"), TrainConfig().lora()


def _raw(env):
    from safetensors.numpy import load_file

    return load_file(str(env.assets / "model.safetensors"))


def _adapters(env):
    """Random non-zero adapters in the original's layout: A [rank, in], B [out, rank]."""
    import numpy as np

    raw, (cfg, lora) = _raw(env), _cfgs(env)
    out = {}
    for i in range(cfg.n_layers):
        for t in TARGETS:
            w = raw[f"model.layers.{i}.{RAW_BLOCK[t]}"]
            out[f"layers.{i}.{t}.lora_A"] = (0.1 * env.rng.standard_normal((lora.rank, w.shape[1]))).astype(np.float32)
            out[f"layers.{i}.{t}.lora_B"] = (0.1 * env.rng.standard_normal((w.shape[0], lora.rank))).astype(np.float32)
    return out


def _torch_model(env):
    import torch
    from llama_sft.checkpoint import load_checkpoint
    from llama_sft.lora import apply_lora, lora_modules

    cfg, lora = _cfgs(env)
    model = load_checkpoint(env.assets, cfg).to(getattr(torch, env.dtype))
    apply_lora(model, lora)
    model.to(getattr(torch, env.dtype))
    with torch.no_grad():
        for name, module in lora_modules(model, lora).items():
            module.lora_A.copy_(torch.from_numpy(env.inputs[f"{name}.lora_A"]))
            module.lora_B.copy_(torch.from_numpy(env.inputs[f"{name}.lora_B"]))
    return model.eval(), lora.scale


def _jax_params(env):
    raw, (cfg, _) = _raw(env), _cfgs(env)
    layers = []
    for i in range(cfg.n_layers):
        layer = {}
        for key, name in RAW_BLOCK.items():
            w = raw[f"model.layers.{i}.{name}"]
            layer[key] = w if w.ndim == 1 else w.T.copy()
        layers.append(layer)
    base = {
        "embed": raw["model.embed_tokens.weight"],
        "layers": layers,
        "final_norm": raw["model.norm.weight"],
        "lm_head": raw["lm_head.weight"].T.copy(),
    }
    lora = {
        "layers": [
            {
                t: {
                    "a": env.inputs[f"layers.{i}.{t}.lora_A"].T.copy(),
                    "b": env.inputs[f"layers.{i}.{t}.lora_B"].T.copy(),
                }
                for t in TARGETS
            }
            for i in range(cfg.n_layers)
        ]
    }
    return base, lora


def _t(env, x):
    import torch

    return torch.tensor(x, dtype=getattr(torch, env.dtype))


def _hidden(env, shape=(2, 7, 64)):
    return env.rng.standard_normal(shape).astype("float32")


def inputs_norm(env):
    return {"x": _hidden(env), "w": (1 + 0.1 * env.rng.standard_normal(64)).astype("float32")}


def reference_norm(env):
    from llama_sft.modeling.norm import RMSNorm

    norm = RMSNorm(64, _cfgs(env)[0].norm_eps)
    norm.weight.data = _t(env, env.inputs["w"])
    return {"y": norm(_t(env, env.inputs["x"]))}


def candidate_norm(env):
    from llama_sft.modeling.norm import rms_norm

    return {"y": rms_norm(env.inputs["x"], env.inputs["w"], _cfgs(env)[0].norm_eps)}


def reference_rope(env):
    import torch
    from llama_sft.modeling.rotary import rope_cos_sin

    cfg = _cfgs(env)[0]
    cos, sin = rope_cos_sin(torch.arange(11), cfg.head_dim, cfg.rope_theta)
    return {"cos": cos, "sin": sin}


def candidate_rope(env):
    import jax.numpy as jnp
    from llama_sft.modeling.rotary import rope_cos_sin

    cfg = _cfgs(env)[0]
    cos, sin = rope_cos_sin(jnp.arange(11), cfg.head_dim, cfg.rope_theta)
    return {"cos": cos, "sin": sin}


def inputs_rotate_half(env):
    return {"x": env.rng.standard_normal((2, 3, 16)).astype("float32")}


def reference_rotate_half(env):
    from llama_sft.modeling.rotary import rotate_half

    return {"y": rotate_half(_t(env, env.inputs["x"]))}


def candidate_rotate_half(env):
    from llama_sft.modeling.rotary import rotate_half

    return {"y": rotate_half(env.inputs["x"])}


def inputs_rotary(env):
    import numpy as np

    t, d = 6, 16
    angles = env.rng.uniform(-3, 3, (t, d // 2))
    full = np.concatenate([angles, angles], -1)
    return {
        "x": _hidden(env, (2, t, 4, d)),
        "cos": np.cos(full).astype("float32"),
        "sin": np.sin(full).astype("float32"),
    }


def reference_rotary(env):
    from llama_sft.modeling.rotary import apply_rotary

    return {"y": apply_rotary(_t(env, env.inputs["x"]), _t(env, env.inputs["cos"]), _t(env, env.inputs["sin"]))}


def candidate_rotary(env):
    from llama_sft.modeling.rotary import apply_rotary

    return {"y": apply_rotary(env.inputs["x"], env.inputs["cos"], env.inputs["sin"])}


def inputs_repeat_kv(env):
    return {"x": _hidden(env, (2, 5, 2, 16))}


def reference_repeat_kv(env):
    from llama_sft.modeling.attention import repeat_kv

    return {"y": repeat_kv(_t(env, env.inputs["x"]), 2)}


def candidate_repeat_kv(env):
    from llama_sft.modeling.attention import repeat_kv

    return {"y": repeat_kv(env.inputs["x"], 2)}


def inputs_lora_linear(env):
    return {
        "x": _hidden(env, (2, 5, 64)),
        "w": (0.1 * env.rng.standard_normal((48, 64))).astype("float32"),
        "A": (0.1 * env.rng.standard_normal((8, 64))).astype("float32"),
        "B": (0.1 * env.rng.standard_normal((48, 8))).astype("float32"),
    }


def reference_lora_linear(env):
    import torch
    from llama_sft.lora import LoRALinear

    base = torch.nn.Linear(64, 48, bias=False)
    base.weight.data = _t(env, env.inputs["w"])
    layer = LoRALinear(base, 8, 16.0).to(getattr(torch, env.dtype))
    layer.lora_A.data = _t(env, env.inputs["A"])
    layer.lora_B.data = _t(env, env.inputs["B"])
    return {"y": layer(_t(env, env.inputs["x"]))}


def candidate_lora_linear(env):
    from llama_sft.lora import lora_linear

    adapter = {"a": env.inputs["A"].T.copy(), "b": env.inputs["B"].T.copy()}
    return {"y": lora_linear(env.inputs["x"], env.inputs["w"].T.copy(), adapter, 16.0 / 8)}


def _tables(env, t, torch_side):
    cfg = _cfgs(env)[0]
    if torch_side:
        import torch
        from llama_sft.modeling.rotary import rope_cos_sin

        cos, sin = rope_cos_sin(torch.arange(t), cfg.head_dim, cfg.rope_theta)
        return cos.to(getattr(torch, env.dtype)), sin.to(getattr(torch, env.dtype))
    import numpy as np

    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float32) / cfg.head_dim))
    freqs = np.arange(t, dtype=np.float32)[:, None] * inv[None, :]
    emb = np.concatenate([freqs, freqs], -1)
    return np.cos(emb), np.sin(emb)


def inputs_attention(env):
    return {"x": _hidden(env), **_adapters(env)}


def reference_attention(env):
    model, _ = _torch_model(env)
    cos, sin = _tables(env, 7, True)
    return {"y": model.layers[0].attn(_t(env, env.inputs["x"]), cos, sin)}


def candidate_attention(env):
    from llama_sft.modeling.attention import attention

    base, lora = _jax_params(env)
    cfg, lcfg = _cfgs(env)
    cos, sin = _tables(env, 7, False)
    return {"y": attention(base["layers"][0], lora["layers"][0], env.inputs["x"], cos, sin, cfg, lcfg.scale)}


def inputs_mlp(env):
    return {"x": _hidden(env), **_adapters(env)}


def reference_mlp(env):
    model, _ = _torch_model(env)
    return {"y": model.layers[1].mlp(_t(env, env.inputs["x"]))}


def candidate_mlp(env):
    from llama_sft.modeling.mlp import swiglu

    base, lora = _jax_params(env)
    return {"y": swiglu(base["layers"][1], lora["layers"][1], env.inputs["x"], _cfgs(env)[1].scale)}


def inputs_forward(env):
    return {"ids": env.rng.integers(0, 264, (2, 12)).astype("int64"), **_adapters(env)}


def reference_forward(env):
    import torch

    model, _ = _torch_model(env)
    logits = model(torch.from_numpy(env.inputs["ids"]))
    return {"logits": logits, "probs": logits}


def candidate_forward(env):
    from llama_sft.modeling.llama import forward

    base, lora = _jax_params(env)
    cfg, lcfg = _cfgs(env)
    logits = forward(base, lora, env.inputs["ids"].astype("int32"), cfg, lcfg.scale)
    return {"logits": logits, "probs": logits}
