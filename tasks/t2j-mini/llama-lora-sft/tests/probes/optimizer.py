"""llama-lora-sft: the learning-rate schedule and the optimizer's steps, below and above the clipping norm."""

PROBES = {
    "lr": {
        "id": "optim.schedule",
        "level": 1,
        "component": "llama_sft.optim.lr_multiplier",
        "description": "Learning rate of every optimizer step.",
    },
    "optimizer": {
        "id": "optim.steps",
        "level": 2,
        "component": "llama_sft.optim.build_optimizer",
        "description": "Four AdamW steps with the schedule from fixed gradients below max_grad_norm; base untouched.",
    },
    "clipping": {
        "id": "optim.clipped_steps",
        "level": 2,
        # The original clips in its training loop, before optimizer.step(): the reference runs train
        # itself, its first four steps, with a loss whose gradients are the probe's (see reference_clipping).
        "component": "llama_sft.train.train",
        "uses": ["llama_sft.optim.build_optimizer", "llama_sft.checkpoint.load_adapter"],
        "description": "Four steps from gradients far above max_grad_norm: clipped by global norm first.",
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


def _adapters(env, scale=0.1):
    import numpy as np

    raw, (cfg, lora) = _raw(env), _cfgs(env)
    out = {}
    for i in range(cfg.n_layers):
        for t in TARGETS:
            w = raw[f"model.layers.{i}.{RAW_BLOCK[t]}"]
            out[f"layers.{i}.{t}.lora_A"] = (scale * env.rng.standard_normal((lora.rank, w.shape[1]))).astype(
                np.float32
            )
            out[f"layers.{i}.{t}.lora_B"] = (scale * env.rng.standard_normal((w.shape[0], lora.rank))).astype(
                np.float32
            )
    return out


def _torch_model(env):
    import torch
    from llama_sft.checkpoint import load_checkpoint
    from llama_sft.lora import apply_lora, lora_modules

    cfg, lora = _cfgs(env)
    model = load_checkpoint(env.assets, cfg)
    apply_lora(model, lora)
    model.to(getattr(torch, env.dtype))
    with torch.no_grad():
        for name, module in lora_modules(model, lora).items():
            module.lora_A.copy_(torch.from_numpy(env.inputs[f"{name}.lora_A"]))
            module.lora_B.copy_(torch.from_numpy(env.inputs[f"{name}.lora_B"]))
    return model


def _jax_params(env):
    raw, (cfg, _) = _raw(env), _cfgs(env)
    layers = []
    for i in range(cfg.n_layers):
        layers.append(
            {k: (w if (w := raw[f"model.layers.{i}.{n}"]).ndim == 1 else w.T.copy()) for k, n in RAW_BLOCK.items()}
        )
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


def _lora_to_raw(lora):
    import numpy as np

    return {
        f"layers.{i}.{t}.lora_{f}": np.asarray(layer[t]["a" if f == "A" else "b"]).T
        for i, layer in enumerate(lora["layers"])
        for t in layer
        for f in "AB"
    }


def reference_lr(env):
    from llama_sft.config import TrainConfig
    from llama_sft.optim import lr_multiplier

    cfg = TrainConfig()
    return {
        "lr": [
            cfg.learning_rate * lr_multiplier(s, cfg.warmup_steps, cfg.total_steps) for s in range(cfg.total_steps + 3)
        ]
    }


def candidate_lr(env):
    import numpy as np
    from llama_sft.config import TrainConfig
    from llama_sft.optim import lr_schedule

    cfg = TrainConfig()
    schedule = lr_schedule(cfg)
    return {"lr": [float(np.asarray(schedule(s))) for s in range(cfg.total_steps + 3)]}


def _step_inputs(env, norm_of_step):
    import numpy as np

    adapters = _adapters(env)
    for step in range(4):
        grads = _adapters(env)
        norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))
        for name, value in grads.items():
            adapters[f"g{step}.{name}"] = (value * (norm_of_step(step) / norm)).astype(np.float32)
    return adapters


def inputs_optimizer(env):
    from llama_sft.config import TrainConfig

    # Below the clipping norm, so clipping (wherever the candidate puts it) changes nothing.
    return _step_inputs(env, lambda step: 0.5 * TrainConfig().max_grad_norm)


def inputs_clipping(env):
    from llama_sft.config import TrainConfig

    return _step_inputs(env, lambda step: (4.0 + step) * TrainConfig().max_grad_norm)


class _FourStepsDone(Exception):
    """Ends the original's training loop after the steps the probe compares."""


def reference_clipping(env):
    """The original's train, run until its fifth loss, where each step's loss is the surrogate
    `sum(p * g)` over the adapter factors: its gradients are exactly the probe's `g`, so what train
    does with them (clip_grad_norm_, AdamW, the schedule) is what is compared. The initial adapters
    reach it through its own --init-adapter path (load_adapter), which also hands the model to the
    probe, in the working dtype."""
    import llama_sft.train as train_module
    import torch
    from llama_sft.config import TrainConfig
    from llama_sft.lora import lora_modules
    from safetensors.numpy import save_file

    lcfg = _cfgs(env)[1]
    dtype = getattr(torch, env.dtype)
    held = {}
    original_load_adapter, original_loss = train_module.load_adapter, train_module.sft_loss

    def load_adapter(model, cfg, path):
        original_load_adapter(model, cfg, path)
        model.to(dtype)
        held["modules"] = lora_modules(model, lcfg)

    def surrogate_loss(logits, labels):
        step = held.setdefault("step", 0)
        if step == 4:
            raise _FourStepsDone
        held["step"] = step + 1
        return sum(
            (getattr(m, f"lora_{f}") * torch.tensor(env.inputs[f"g{step}.{name}.lora_{f}"], dtype=dtype)).sum()
            for name, m in held["modules"].items()
            for f in "AB"
        )

    init = env.scratch / "init_adapter.safetensors"
    save_file({k: v for k, v in env.inputs.items() if k.startswith("layers.")}, str(init))
    train_module.load_adapter, train_module.sft_loss = load_adapter, surrogate_loss
    try:
        train_module.train(
            env.assets, env.assets / "sft_data.jsonl", TrainConfig(), env.scratch / "run", init_adapter=init
        )
    except _FourStepsDone:
        pass
    finally:
        train_module.load_adapter, train_module.sft_loss = original_load_adapter, original_loss
    lora = {}
    for name, m in held["modules"].items():
        lora[f"{name}.lora_A"], lora[f"{name}.lora_B"] = m.lora_A.detach(), m.lora_B.detach()
    return {"lora": lora, "base_unchanged": True}


def candidate_clipping(env):
    return candidate_optimizer(env)


def reference_optimizer(env):
    import torch
    from llama_sft.config import TrainConfig
    from llama_sft.lora import lora_modules
    from llama_sft.optim import build_optimizer

    cfg = TrainConfig()
    model = _torch_model(env)
    modules = lora_modules(model, _cfgs(env)[1])
    params = [p for m in modules.values() for p in (m.lora_A, m.lora_B)]
    optimizer, scheduler = build_optimizer(params, cfg)
    norms = []
    for step in range(4):
        for name, m in modules.items():
            m.lora_A.grad = torch.tensor(env.inputs[f"g{step}.{name}.lora_A"], dtype=getattr(torch, env.dtype))
            m.lora_B.grad = torch.tensor(env.inputs[f"g{step}.{name}.lora_B"], dtype=getattr(torch, env.dtype))
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)))
        optimizer.step()
        scheduler.step()
    lora = {}
    for name, m in modules.items():
        lora[f"{name}.lora_A"], lora[f"{name}.lora_B"] = m.lora_A.detach(), m.lora_B.detach()
    return {"lora": lora, "base_unchanged": True}


def candidate_optimizer(env):
    import jax
    import numpy as np
    import optax
    from llama_sft.config import TrainConfig
    from llama_sft.optim import make_optimizer

    base, lora = _jax_params(env)
    params = {"base": base, "lora": lora}
    optimizer = make_optimizer(TrainConfig())
    state = optimizer.init(params)
    for step in range(4):
        g_lora = {
            "layers": [
                {
                    t: {
                        "a": env.inputs[f"g{step}.layers.{i}.{t}.lora_A"].T.copy(),
                        "b": env.inputs[f"g{step}.layers.{i}.{t}.lora_B"].T.copy(),
                    }
                    for t in TARGETS
                }
                for i in range(len(lora["layers"]))
            ]
        }
        g_base = jax.tree_util.tree_map(lambda x: np.full_like(x, 0.01), base)
        updates, state = optimizer.update({"base": g_base, "lora": g_lora}, state, params)
        params = optax.apply_updates(params, updates)
    after, before = jax.tree_util.tree_leaves(params["base"]), jax.tree_util.tree_leaves(base)
    unchanged = len(after) == len(before) and all(
        bool(np.array_equal(np.asarray(a), np.asarray(b))) for a, b in zip(after, before, strict=True)
    )
    return {"lora": _lora_to_raw(params["lora"]), "base_unchanged": unchanged}
