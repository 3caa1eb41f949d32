"""llama-lora-sft: checkpoint and adapters, loss, gradients, validation, the training run."""

PROBES = {
    "convert": {
        "id": "checkpoint.convert",
        "level": 1,
        "component": "llama_sft.checkpoint.load_checkpoint",
        "description": "convert_checkpoint lays the raw weights out as documented ([in, out] kernels).",
    },
    "adapter_io": {
        "id": "checkpoint.adapter",
        "level": 1,
        "component": "llama_sft.checkpoint.save_adapter",
        "uses": ["llama_sft.checkpoint.load_adapter"],
        "description": "save_adapter writes and load_adapter reads the original's adapter format.",
    },
    "loss": {
        "id": "loss.sft",
        "level": 1,
        "component": "llama_sft.loss.sft_loss",
        "description": "token_nll and sft_loss with prompt and padding masked.",
    },
    "grads": {
        # One loss and its gradients, not a run of train (train.run covers that): the reference runs
        # the original's LoRA layers inside its model, backward through its sft_loss.
        "uses": ["llama_sft.checkpoint.load_checkpoint", "llama_sft.lora.apply_lora", "llama_sft.loss.sft_loss"],
        "id": "grads.lora",
        "level": 2,
        "component": "llama_sft.lora.LoRALinear",
        "description": "SFT loss and its gradients with respect to every adapter factor.",
        "compare": {"loss": "scalar", "grads/*": "tensor"},
    },
    "validation": {
        # validation_loss runs whatever model it is given: the model is a dependency
        "uses": ["llama_sft.modeling.llama.LlamaForCausalLM"],
        "id": "evaluate.validation_loss",
        "level": 2,
        "component": "llama_sft.evaluate.validation_loss",
        "description": "Held-out loss with non-zero adapters.",
    },
    "run": {
        "id": "train.run",
        "level": 3,
        "component": "llama_sft.train.train",
        "timeout_s": 400,
        "description": "Twelve steps of the real training entry point: losses, lr, grad norms, adapter, val loss.",
        "compare": {
            "train_loss": "tensor",
            "lr": "tensor",
            "grad_norm": "tensor",
            "val_loss": "banded",
            "adapter/*": "tensor",
        },
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
RUN_STEPS = 12


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


def _adapter_names(env):
    cfg = _cfgs(env)[0]
    return [f"layers.{i}.{t}.lora_{f}" for i in range(cfg.n_layers) for t in TARGETS for f in "AB"]


def _torch_model(env, dtype=None):
    """The original's model (its load_checkpoint, its apply_lora) holding the probe's adapters."""
    import torch
    from llama_sft.checkpoint import load_checkpoint
    from llama_sft.lora import apply_lora, lora_modules

    cfg, lora = _cfgs(env)
    model = load_checkpoint(env.assets, cfg)
    apply_lora(model, lora)
    model.to(getattr(torch, dtype or env.dtype))
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


def _records(env):
    from llama_sft.data import load_jsonl

    return load_jsonl(env.assets / "sft_data.jsonl")


def _encoded(env, n=None):
    from llama_sft.config import TrainConfig
    from llama_sft.data import encode_example
    from llama_sft.tokenizer import ByteTokenizer

    tok = ByteTokenizer(_cfgs(env)[0].vocab_size)
    records = _records(env)[: n or None]
    return [encode_example(tok, r, TrainConfig().max_seq_len) for r in records], tok


def _batch(env, n=8):
    import numpy as np
    from llama_sft.config import TrainConfig
    from llama_sft.data import collate

    encoded, tok = _encoded(env, n)
    batch = collate(encoded, TrainConfig().max_seq_len, tok.pad_id)
    return {k: np.asarray(v) for k, v in batch.items()}


def reference_convert(env):
    from llama_sft.checkpoint import load_checkpoint

    # The original's model as its load_checkpoint builds it, by state_dict name; float32 whatever the
    # working dtype, as the checkpoint is and as the candidate converts it.
    model = load_checkpoint(env.assets, _cfgs(env)[0])
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def candidate_convert(env):
    import numpy as np
    from llama_sft.checkpoint import convert_checkpoint

    base = convert_checkpoint(_raw(env), _cfgs(env)[0])
    out = {
        "embed.weight": base["embed"],
        "final_norm.weight": base["final_norm"],
        "lm_head.weight": np.asarray(base["lm_head"]).T,
    }
    names = {
        "attn_norm": "attn_norm.weight",
        "mlp_norm": "mlp_norm.weight",
        "q_proj": "attn.q_proj.weight",
        "k_proj": "attn.k_proj.weight",
        "v_proj": "attn.v_proj.weight",
        "o_proj": "attn.o_proj.weight",
        "gate_proj": "mlp.gate_proj.weight",
        "up_proj": "mlp.up_proj.weight",
        "down_proj": "mlp.down_proj.weight",
    }
    for i, layer in enumerate(base["layers"]):
        for key, name in names.items():
            value = np.asarray(layer[key])
            out[f"layers.{i}.{name}"] = value if value.ndim == 1 else value.T
    return out


def inputs_adapter_io(env):
    return _adapters(env)


def reference_adapter_io(env):
    from llama_sft.checkpoint import load_adapter, load_checkpoint, save_adapter
    from llama_sft.lora import apply_lora, lora_modules
    from safetensors.numpy import load_file, save_file

    # The adapter file is float32 whatever the working dtype: the original's model is used as loaded.
    cfg, lcfg = _cfgs(env)
    path = env.scratch / "adapter.safetensors"
    save_adapter(_torch_model(env, dtype="float32"), lcfg, path)
    saved = dict(load_file(str(path)))
    source = env.scratch / "given.safetensors"
    save_file({k: env.inputs[k] for k in _adapter_names(env)}, str(source))
    model = load_checkpoint(env.assets, cfg)
    apply_lora(model, lcfg)
    load_adapter(model, lcfg, source)
    loaded = {
        f"{name}.lora_{f}": getattr(module, f"lora_{f}").detach()
        for name, module in lora_modules(model, lcfg).items()
        for f in "AB"
    }
    return {"saved": saved, "loaded": loaded}


def candidate_adapter_io(env):
    from llama_sft.checkpoint import load_adapter, save_adapter
    from safetensors.numpy import load_file, save_file

    cfg, lcfg = _cfgs(env)
    _, lora = _jax_params(env)
    path = str(env.scratch / "adapter.safetensors")
    save_adapter(lora, path)
    saved = dict(load_file(path))
    source = str(env.scratch / "given.safetensors")
    save_file({k: env.inputs[k] for k in _adapter_names(env)}, source)
    return {"saved": saved, "loaded": _lora_to_raw(load_adapter(source, cfg, lcfg))}


def inputs_loss(env):
    import numpy as np

    labels = env.rng.integers(0, 264, (3, 10)).astype("int64")
    labels[:, :4] = -100
    labels[2, 7:] = -100
    return {
        "logits": (2 * env.rng.standard_normal((3, 10, 264))).astype(np.float32),
        "labels": labels,
    }


def reference_loss(env):
    import torch
    from llama_sft.loss import sft_loss, token_nll

    logits, labels = (
        torch.tensor(env.inputs["logits"], dtype=getattr(torch, env.dtype)),
        torch.from_numpy(env.inputs["labels"]),
    )
    total, count = token_nll(logits, labels)
    return {"sum": total, "count": int(count), "loss": sft_loss(logits, labels)}


def candidate_loss(env):
    from llama_sft.loss import sft_loss, token_nll

    logits, labels = env.inputs["logits"], env.inputs["labels"].astype("int32")
    total, count = token_nll(logits, labels)
    return {"sum": total, "count": int(count), "loss": sft_loss(logits, labels)}


def inputs_grads(env):
    return _adapters(env)


def reference_grads(env):
    import torch
    from llama_sft.lora import lora_modules
    from llama_sft.loss import sft_loss

    model = _torch_model(env).eval()
    batch = _batch(env)
    loss = sft_loss(model(torch.from_numpy(batch["input_ids"]).long()), torch.from_numpy(batch["labels"]).long())
    loss.backward()
    grads = {}
    for name, module in lora_modules(model, _cfgs(env)[1]).items():
        grads[f"{name}.lora_A"], grads[f"{name}.lora_B"] = module.lora_A.grad, module.lora_B.grad
    return {"loss": loss, "grads": grads}


def candidate_grads(env):
    import jax
    from llama_sft.loss import sft_loss
    from llama_sft.modeling.llama import forward

    base, lora = _jax_params(env)
    cfg, lcfg = _cfgs(env)
    batch = _batch(env)

    def loss_fn(adapters):
        return sft_loss(forward(base, adapters, batch["input_ids"], cfg, lcfg.scale), batch["labels"])

    loss, grads = jax.value_and_grad(loss_fn)(lora)
    return {"loss": loss, "grads": _lora_to_raw(grads)}


def inputs_validation(env):
    return _adapters(env)


def reference_validation(env):
    from llama_sft.config import TrainConfig
    from llama_sft.evaluate import validation_loss

    encoded, tok = _encoded(env, 24)
    cfg = TrainConfig()
    return {"loss": validation_loss(_torch_model(env), encoded, cfg.max_seq_len, tok.pad_id, cfg.batch_size)}


def candidate_validation(env):
    from llama_sft.config import TrainConfig
    from llama_sft.evaluate import validation_loss

    encoded, tok = _encoded(env, 24)
    cfg, lcfg = _cfgs(env)
    base, lora = _jax_params(env)
    tcfg = TrainConfig()
    return {
        "loss": float(
            validation_loss(base, lora, encoded, cfg, lcfg.scale, tcfg.max_seq_len, tok.pad_id, tcfg.batch_size)
        )
    }


def _run_main(env):
    import json

    from llama_sft.train import main
    from safetensors.numpy import load_file, save_file

    config = env.scratch / "config.json"
    config.write_text(json.dumps({"total_steps": RUN_STEPS, "warmup_steps": 3}))
    # The same initial adapter on both sides: the original's random init is torch's own.
    init = env.scratch / "init_adapter.safetensors"
    save_file({k: env.inputs[k] for k in _adapter_names(env)}, str(init))
    out = env.scratch / "run"
    main(
        [
            "--checkpoint-dir",
            str(env.assets),
            "--data",
            str(env.assets / "sft_data.jsonl"),
            "--config",
            str(config),
            "--out",
            str(out),
            "--init-adapter",
            str(init),
        ]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "train_loss": metrics["train_loss"],
        "lr": metrics["lr"],
        "grad_norm": metrics["grad_norm"],
        "val_loss": metrics["val_loss"],
        "n_train": metrics["n_train"],
        "n_val": metrics["n_val"],
        "adapter": dict(load_file(str(out / "adapter.safetensors"))),
    }


def inputs_run(env):
    return _adapters(env, scale=0.05)


def reference_run(env):
    return _run_main(env)


def candidate_run(env):
    return _run_main(env)
