"""litgpt-lora: LoRA layers (fused QKV and plain), merging, trainable marking, initialisation.

The reference side builds `litgpt.lora.GPT` from the checkpoint with LoRA factors drawn here
(B non-zero, so the updates show) and hands the whole state dict to both sides as inputs.
"""

PROBES = {
    "qkv": {
        "id": "lora.qkv",
        "level": 2,
        "component": "litgpt.lora.LoRAQKVLinear",
        "uses": ["litgpt.model.GPT"],
        "description": "Logits with only the fused QKV projection's factors non-zero (query and value enabled).",
        "compare": {"logits": "tensor"},
    },
    "linear": {
        "id": "lora.linear",
        "level": 2,
        "component": "litgpt.lora.LoRALinear",
        "uses": ["litgpt.model.GPT"],
        "description": "Logits with only the plain LoRA linears' factors non-zero (projection, MLP, head).",
        "compare": {"logits": "tensor"},
    },
    "merge": {
        "id": "lora.merge",
        "level": 2,
        "component": "litgpt.lora.merge_lora_weights",
        "uses": ["litgpt.lora.LoRAQKVLinear", "litgpt.lora.LoRALinear"],
        "compare": {"weights/*": "tensor", "logits": "tensor"},
    },
    "trainable": {"id": "lora.trainable", "level": 1, "component": "litgpt.lora.mark_only_lora_as_trainable"},
    "check_init": {
        "id": "lora.init",
        "level": 1,
        "component": "litgpt.lora.LoRALinear.reset_parameters",
        "description": "init_lora: B zero, A inside ±1/sqrt(in_features), the layout litgpt's GPT has.",
        "uses": ["litgpt.utils.lazy_load"],
    },
}

# litgpt.lora.GPT's factors for the task's config and lora.yaml (query and value of the fused QKV enabled)
LORA_SHAPES = {
    "lm_head.lora_A": (4, 48),
    "lm_head.lora_B": (96, 4),
    "transformer.h.0.attn.qkv.lora_A": (8, 48),
    "transformer.h.0.attn.qkv.lora_B": (72, 4),
    "transformer.h.0.attn.proj.lora_A": (4, 48),
    "transformer.h.0.attn.proj.lora_B": (48, 4),
    "transformer.h.0.mlp.fc_1.lora_A": (4, 48),
    "transformer.h.0.mlp.fc_1.lora_B": (96, 4),
    "transformer.h.0.mlp.fc_2.lora_A": (4, 48),
    "transformer.h.0.mlp.fc_2.lora_B": (96, 4),
    "transformer.h.0.mlp.proj.lora_A": (4, 96),
    "transformer.h.0.mlp.proj.lora_B": (48, 4),
    "transformer.h.1.attn.qkv.lora_A": (8, 48),
    "transformer.h.1.attn.qkv.lora_B": (72, 4),
    "transformer.h.1.attn.proj.lora_A": (4, 48),
    "transformer.h.1.attn.proj.lora_B": (48, 4),
    "transformer.h.1.mlp.fc_1.lora_A": (4, 48),
    "transformer.h.1.mlp.fc_1.lora_B": (96, 4),
    "transformer.h.1.mlp.fc_2.lora_A": (4, 48),
    "transformer.h.1.mlp.fc_2.lora_B": (96, 4),
    "transformer.h.1.mlp.proj.lora_A": (4, 96),
    "transformer.h.1.mlp.proj.lora_B": (48, 4),
}


def _lora_values(env):
    import yaml

    return yaml.safe_load((env.assets / "lora.yaml").read_text())


def _reference_model(env, state):
    import torch
    import yaml
    from litgpt.lora import GPT, Config

    values = yaml.safe_load((env.assets / "model_config.yaml").read_text())
    model = GPT(Config(**values, **_lora_values(env)))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model.to(getattr(torch, env.dtype))


def _state_inputs(env, keep):
    """The checkpoint under litgpt.lora.GPT's names, with factors where `keep(name)` (else B zero)."""
    import numpy as np
    import torch
    import yaml
    from litgpt.lora import GPT, Config

    values = yaml.safe_load((env.assets / "model_config.yaml").read_text())
    model = GPT(Config(**values, **_lora_values(env)))
    model.load_state_dict(torch.load(env.assets / "lit_model.pth", weights_only=True), strict=False)
    state = {}
    for name, value in model.state_dict().items():
        value = value.numpy()
        if name.endswith("lora_A"):
            bound = 1.0 / np.sqrt(value.shape[1])
            value = env.rng.uniform(-bound, bound, value.shape)
        elif name.endswith("lora_B"):
            value = env.rng.uniform(-0.05, 0.05, value.shape) if keep(name) else np.zeros(value.shape)
        state[f"sd.{name}"] = np.asarray(value, dtype="float32")
    return {"ids": env.rng.integers(0, 80, size=(2, 13)).astype("int64"), **state}


def _state(env):
    return {k[3:]: v for k, v in env.inputs.items() if k.startswith("sd.")}


def _reference_logits(env):
    import torch

    with torch.no_grad():
        return {"logits": _reference_model(env, _state(env))(torch.from_numpy(env.inputs["ids"]))}


def _candidate_config(env):
    from litgpt.lora import Config

    return Config.from_file(env.assets / "model_config.yaml", **_lora_values(env))


def _candidate_logits(env):
    from litgpt.lora import gpt_forward
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict

    config = _candidate_config(env)
    return {"logits": gpt_forward(params_from_state_dict(_state(env), config), config, env.inputs["ids"])}


def inputs_qkv(env):
    return _state_inputs(env, lambda name: ".attn.qkv." in name)


def reference_qkv(env):
    return _reference_logits(env)


def candidate_qkv(env):
    return _candidate_logits(env)


def inputs_linear(env):
    return _state_inputs(env, lambda name: ".attn.qkv." not in name)


def reference_linear(env):
    return _reference_logits(env)


def candidate_linear(env):
    return _candidate_logits(env)


def inputs_merge(env):
    return _state_inputs(env, lambda name: True)


def reference_merge(env):
    import torch
    from litgpt.lora import merge_lora_weights

    model = _reference_model(env, _state(env))
    merge_lora_weights(model)
    weights = {k.replace(".", "_"): v for k, v in model.state_dict().items() if k.endswith("linear.weight")}
    with torch.no_grad():
        logits = model(torch.from_numpy(env.inputs["ids"]))
    return {"weights": weights, "logits": logits}


def candidate_merge(env):
    from litgpt.lora import gpt_forward, merge_lora_weights
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict, state_dict_from_params

    config = _candidate_config(env)
    merged = merge_lora_weights(params_from_state_dict(_state(env), config), config)
    flat = state_dict_from_params(merged)
    weights = {k.replace(".", "_"): v for k, v in flat.items() if k.endswith("linear.weight")}
    return {"weights": weights, "logits": gpt_forward(merged, config, env.inputs["ids"])}


def inputs_trainable(env):
    return _state_inputs(env, lambda name: True)


def reference_trainable(env):
    from litgpt.lora import mark_only_lora_as_trainable

    model = _reference_model(env, _state(env))
    mark_only_lora_as_trainable(model)
    return {"trainable": {n.replace(".", "_"): bool(p.requires_grad) for n, p in model.named_parameters()}}


def candidate_trainable(env):
    import numpy as np
    from litgpt.lora import mark_only_lora_as_trainable
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict, state_dict_from_params

    mask = state_dict_from_params(
        mark_only_lora_as_trainable(params_from_state_dict(_state(env), _candidate_config(env)))
    )
    return {"trainable": {n.replace(".", "_"): bool(np.asarray(v)) for n, v in mask.items()}}


def check_init(env):
    import jax
    import numpy as np
    from litgpt.lora import init_lora
    from litgpt.scripts.convert_lit_checkpoint import params_from_state_dict, state_dict_from_params
    from litgpt.utils import load_checkpoint

    config = _candidate_config(env)
    base = load_checkpoint(env.assets / "lit_model.pth")
    fresh = state_dict_from_params(
        init_lora(params_from_state_dict(base, config), config, jax.random.PRNGKey(env.seed))
    )
    wanted = {k: tuple(v) for k, v in LORA_SHAPES.items()}
    layout = {k: np.shape(v) for k, v in fresh.items() if "lora_" in k} == wanted
    a = [np.asarray(v) * np.sqrt(np.shape(v)[1]) for k, v in fresh.items() if k.endswith("lora_A")]
    return {
        "factors_where_litgpt_has_them": layout,
        "b_zero": all(not np.any(np.asarray(v)) for k, v in fresh.items() if k.endswith("lora_B")),
        "a_within_kaiming_bound": bool(a) and all(np.all(np.abs(x) <= 1.0 + 1e-6) for x in a),
        "a_spread_uniform": bool(a) and abs(float(np.concatenate([x.ravel() for x in a]).std()) - 3**-0.5) < 0.05,
    }
