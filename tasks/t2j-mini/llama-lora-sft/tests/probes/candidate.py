"""llama-lora-sft: candidate-side checks (parameter trees, adapter init, live gradients, jit, entry point)."""

PROBES = {
    "interface": {
        "id": "interface",
        "kind": "interface",
        "level": 0,
        "locate_failures": True,
        "component": "llama_sft",
        "description": "Every module and public name the instruction lists exists.",
    },
    "param_tree": {
        "id": "param_tree",
        "kind": "param_tree",
        "level": 0,
        "component": "llama_sft.checkpoint.load_checkpoint",
        "description": "load_checkpoint gives the documented pytree of arrays with [in, out] kernels.",
    },
    "lora_init": {
        "id": "lora.init",
        "kind": "param_tree",
        "level": 1,
        "component": "llama_sft.lora.LoRALinear",
        "description": "init_lora: A ~ U(-1/sqrt(in), 1/sqrt(in)) as [in, rank], B zero as [rank, out], seven targets.",
    },
    "grads_live": {
        "id": "grad_liveness",
        "kind": "grad_liveness",
        "level": 0,
        "component": "llama_sft.train.train",
        "description": "Two train steps from a fresh adapter give finite, non-zero gradients and move the adapters.",
    },
    "jit": {
        "id": "jit",
        "kind": "jit",
        "level": 0,
        "component": "llama_sft.train.train",
        "description": "The train step traces under jax.jit.",
    },
    "entrypoint": {
        "id": "entrypoint.train",
        "kind": "entrypoint",
        "level": 3,
        "component": "llama_sft.train.main",
        "timeout_s": 400,
        "description": "python -m llama_sft.train writes adapter.safetensors and metrics.json.",
    },
}

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _cfgs(env):
    from llama_sft.config import TrainConfig, load_model_config

    return load_model_config(env.assets / "config.json"), TrainConfig()


def check_param_tree(env):
    import jax
    from llama_sft.checkpoint import load_checkpoint

    cfg, _ = _cfgs(env)
    base = load_checkpoint(env.assets, cfg)
    d, v, h = cfg.dim, cfg.vocab_size, cfg.hidden_dim
    kv = cfg.n_kv_heads * cfg.head_dim
    expected = {
        "attn_norm": (d,),
        "q_proj": (d, d),
        "k_proj": (d, kv),
        "v_proj": (d, kv),
        "o_proj": (d, d),
        "mlp_norm": (d,),
        "gate_proj": (d, h),
        "up_proj": (d, h),
        "down_proj": (h, d),
    }
    layers = base["layers"]
    return {
        "leaves_are_arrays": all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(base)),
        "embed": tuple(base["embed"].shape) == (v, d),
        "lm_head": tuple(base["lm_head"].shape) == (d, v),
        "final_norm": tuple(base["final_norm"].shape) == (d,),
        "n_layers": len(layers) == cfg.n_layers,
        "layer_shapes": all(tuple(layer[k].shape) == s for layer in layers for k, s in expected.items()),
    }


def check_lora_init(env):
    import jax
    import numpy as np
    from llama_sft.lora import init_lora

    cfg, tcfg = _cfgs(env)
    lcfg = tcfg.lora()
    lora = init_lora(jax.random.PRNGKey(env.seed), cfg, lcfg)
    a_ok, b_zero, spread = True, True, []
    for layer in lora["layers"]:
        for t in TARGETS:
            a, b = np.asarray(layer[t]["a"]), np.asarray(layer[t]["b"])
            bound = 1.0 / np.sqrt(a.shape[0])
            a_ok &= a.shape[1] == lcfg.rank and b.shape[0] == lcfg.rank and bool(np.abs(a).max() <= bound * (1 + 1e-6))
            b_zero &= not bool(np.any(b))
            spread.append(a.std() / (bound / np.sqrt(3.0)))
    # The std of a uniform sample of this size is within a few percent of bound/sqrt(3).
    return {
        "layers": len(lora["layers"]) == cfg.n_layers,
        "targets": all(set(layer) == set(TARGETS) for layer in lora["layers"]),
        "a_uniform_within_bound": a_ok,
        "b_zero": b_zero,
        "a_spread_matches": bool(abs(float(np.mean(spread)) - 1.0) < 0.1),
    }


def _state_and_batch(env):
    import jax
    import numpy as np
    from llama_sft.checkpoint import load_checkpoint
    from llama_sft.data import collate, encode_example, load_jsonl
    from llama_sft.lora import init_lora
    from llama_sft.tokenizer import ByteTokenizer
    from llama_sft.train import create_train_state

    cfg, tcfg = _cfgs(env)
    tok = ByteTokenizer(cfg.vocab_size)
    records = load_jsonl(env.assets / "sft_data.jsonl")[: tcfg.batch_size]
    batch = collate([encode_example(tok, r, tcfg.max_seq_len) for r in records], tcfg.max_seq_len, tok.pad_id)
    batch = {k: np.asarray(v) for k, v in batch.items()}
    state = create_train_state(
        load_checkpoint(env.assets, cfg), init_lora(jax.random.PRNGKey(0), cfg, tcfg.lora()), tcfg
    )
    return state, batch


def check_grads_live(env):
    import jax
    import numpy as np
    from llama_sft.train import make_train_step

    cfg, tcfg = _cfgs(env)
    state, batch = _state_and_batch(env)
    before = jax.tree_util.tree_leaves(state.params["lora"])
    step = make_train_step(cfg, tcfg)
    # The schedule's first learning rate is 0 (warmup from 0), so take two steps.
    new_state, metrics = step(*step(state, batch)[:1], batch)
    after = jax.tree_util.tree_leaves(new_state.params["lora"])
    grad_norm = float(metrics["grad_norm"])
    return {
        "loss_finite": bool(np.isfinite(float(metrics["loss"]))),
        "grad_norm_positive": bool(grad_norm > 0) and bool(np.isfinite(grad_norm)),
        "adapters_move": not _leaves_equal(before, after),
        "base_untouched": _leaves_equal(
            jax.tree_util.tree_leaves(state.params["base"]), jax.tree_util.tree_leaves(new_state.params["base"])
        ),
    }


def _leaves_equal(before, after) -> bool:
    """Two trees' leaves, equal one by one; a leaf added or dropped makes them unequal (never only the common part)."""
    import numpy as np

    return len(before) == len(after) and all(
        bool(np.array_equal(np.asarray(x), np.asarray(y))) for x, y in zip(before, after, strict=True)
    )


def check_jit(env):
    import jax
    from llama_sft.train import make_train_step

    cfg, tcfg = _cfgs(env)
    state, batch = _state_and_batch(env)
    step = jax.jit(make_train_step(cfg, tcfg))
    state, metrics = step(state, batch)
    state, metrics = step(state, batch)
    return {
        "traces_and_runs": bool(jax.tree_util.tree_leaves(state.params)),
        "loss": float(metrics["loss"]) > 0,
    }


def check_entrypoint(env):
    import json
    import subprocess
    import sys

    config = env.scratch / "config.json"
    config.write_text(json.dumps({"total_steps": 3, "warmup_steps": 1}))
    out = env.scratch / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llama_sft.train",
            "--checkpoint-dir",
            str(env.assets),
            "--data",
            str(env.assets / "sft_data.jsonl"),
            "--config",
            str(config),
            "--out",
            str(out),
        ],
        cwd=str(env.candidate),
        capture_output=True,
        text=True,
        timeout=380,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"entry point failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "writes_adapter": (out / "adapter.safetensors").is_file(),
        "metrics_complete": {"train_loss", "lr", "grad_norm", "val_loss", "n_train", "n_val"} <= set(metrics),
        "three_steps": len(metrics["train_loss"]) == 3,
    }


INTERFACE = {
    "config": [
        "ModelConfig",
        "LoraConfig",
        "TrainConfig",
        "load_model_config",
        "load_train_config",
    ],
    "tokenizer": ["ByteTokenizer"],
    "template": ["prompt_ids", "response_ids", "render"],
    "data": [
        "IGNORE_INDEX",
        "load_jsonl",
        "stable_permutation",
        "split_train_val",
        "encode_example",
        "collate",
        "batch_schedule",
    ],
    "modeling.norm": ["rms_norm"],
    "modeling.rotary": ["rope_cos_sin", "apply_rotary"],
    "modeling.attention": ["repeat_kv", "attention"],
    "modeling.mlp": ["swiglu"],
    "modeling.llama": ["forward"],
    "lora": ["init_lora", "lora_linear"],
    "checkpoint": ["convert_checkpoint", "load_checkpoint", "save_adapter", "load_adapter"],
    "loss": ["token_nll", "sft_loss"],
    "optim": ["lr_schedule", "make_optimizer"],
    "evaluate": ["validation_loss"],
    "train": ["TrainState", "create_train_state", "make_train_step", "train", "main"],
}


def check_interface(env):
    import importlib

    out = {}
    for module, names in INTERFACE.items():
        mod = importlib.import_module(f"llama_sft.{module}")
        for name in names:
            out[f"{module}.{name}"] = hasattr(mod, name)
    out["LoraConfig.scale"] = (
        getattr(
            importlib.import_module("llama_sft.config").LoraConfig(rank=8, alpha=16.0),
            "scale",
            None,
        )
        == 2.0
    )
    out["configs/sft_tiny.json"] = (env.candidate / "configs" / "sft_tiny.json").is_file()
    return out
