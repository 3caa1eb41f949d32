"""llama-lora-sft: data and template, checkpoint and adapters, loss, gradients, schedule, optimizer, train step, run."""

PROBES = {
    "lora_config": {
        "id": "config.lora",
        "level": 1,
        "component": "llama_sft.config.LoraConfig",
        "description": "LoraConfig defaults and its scale (alpha / rank) for a few settings.",
    },
    "tokenizer": {
        "id": "data.tokenizer",
        "level": 1,
        "component": "llama_sft.tokenizer.ByteTokenizer",
        "description": "Special token ids and the encode/decode round trip of the first prompts.",
    },
    "prompt_part": {
        "id": "data.template.prompt",
        "level": 1,
        "component": "llama_sft.template.prompt_ids",
        "description": "Token ids of the prompt part of the chat template, first records.",
    },
    "response_part": {
        "id": "data.template.response",
        "level": 1,
        "component": "llama_sft.template.response_ids",
        "description": "Token ids of the response part of the chat template, first records.",
    },
    "template": {
        "id": "data.template",
        "level": 1,
        "component": "llama_sft.template.render",
        "description": "The whole chat template rendered as text, first records.",
    },
    "encode": {
        "id": "data.encode",
        "level": 1,
        "component": "llama_sft.data.encode_example",
        "description": "encode_example and collate: ids, label masking, padding.",
    },
    "schedule_batches": {
        "id": "data.split_and_batches",
        "level": 1,
        "component": "llama_sft.data.batch_schedule",
        "description": "Train/validation split and the batch order.",
    },
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
        "description": "save_adapter writes and load_adapter reads the original's adapter format.",
    },
    "loss": {
        "id": "loss.sft",
        "level": 1,
        "component": "llama_sft.loss.sft_loss",
        "description": "token_nll and sft_loss with prompt and padding masked.",
    },
    "lr": {
        "id": "optim.schedule",
        "level": 1,
        "component": "llama_sft.optim.lr_multiplier",
        "description": "Learning rate of every optimizer step.",
    },
    "grads": {
        "id": "grads.lora",
        "level": 2,
        "component": "llama_sft.train.train",
        "description": "SFT loss and its gradients with respect to every adapter factor.",
        "compare": {"loss": "scalar", "grads/*": "tensor"},
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
        # the original clips in its training loop, before optimizer.step()
        "component": "llama_sft.train.train",
        "uses": ["llama_sft.optim.build_optimizer"],
        "description": "Four steps from gradients far above max_grad_norm: clipped by global norm first.",
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


def _template_out(env, part):
    from llama_sft.template import prompt_ids, render, response_ids
    from llama_sft.tokenizer import ByteTokenizer

    tok = ByteTokenizer(_cfgs(env)[0].vocab_size)
    records = _records(env)[:6]
    if part == "tokenizer":
        return {
            "special": [tok.bos_id, tok.eos_id, tok.pad_id, tok.user_id, tok.assistant_id],
            "ids": [list(tok.encode(r["prompt"])) for r in records],
            "roundtrip": [tok.decode(tok.encode(r["prompt"])) for r in records],
        }
    if part == "prompt":
        return {"prompt": [list(prompt_ids(tok, r["prompt"])) for r in records]}
    if part == "response":
        return {"response": [list(response_ids(tok, r["response"])) for r in records]}
    return {"render": [render(tok, r["prompt"], r["response"]) for r in records]}


def reference_tokenizer(env):
    return _template_out(env, "tokenizer")


def candidate_tokenizer(env):
    return _template_out(env, "tokenizer")


def reference_prompt_part(env):
    return _template_out(env, "prompt")


def candidate_prompt_part(env):
    return _template_out(env, "prompt")


def reference_response_part(env):
    return _template_out(env, "response")


def candidate_response_part(env):
    return _template_out(env, "response")


def reference_template(env):
    return _template_out(env, "render")


def candidate_template(env):
    return _template_out(env, "render")


def reference_encode(env):
    encoded, _ = _encoded(env, 10)
    return {
        "ids": [list(i) for i, _ in encoded],
        "labels": [list(lab) for _, lab in encoded],
        "batch": _batch(env),
    }


def candidate_encode(env):
    return reference_encode(env)


def reference_schedule_batches(env):
    from llama_sft.config import TrainConfig
    from llama_sft.data import batch_schedule, split_train_val

    cfg = TrainConfig()
    train, val = split_train_val(_records(env), cfg.val_fraction, cfg.split_seed)
    return {
        "train": [r["prompt"] for r in train],
        "val": [r["prompt"] for r in val],
        "batches": [list(map(int, b)) for b in batch_schedule(len(train), cfg.batch_size, cfg.total_steps, cfg.seed)],
    }


def candidate_schedule_batches(env):
    return reference_schedule_batches(env)


def reference_convert(env):
    raw = _raw(env)
    from llama_sft.checkpoint import raw_to_module_name

    return {raw_to_module_name(k): v for k, v in raw.items()}


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
    adapters = {k: env.inputs[k] for k in _adapter_names(env)}
    return {"saved": adapters, "loaded": adapters}


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


def reference_clipping(env):
    return reference_optimizer(env)


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
    unchanged = all(
        bool(np.array_equal(np.asarray(a), np.asarray(b)))
        for a, b in zip(jax.tree_util.tree_leaves(params["base"]), jax.tree_util.tree_leaves(base))
    )
    return {"lora": _lora_to_raw(params["lora"]), "base_unchanged": unchanged}


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


def reference_lora_config(env):
    import dataclasses

    from llama_sft.config import LoraConfig

    default = LoraConfig()
    variants = [dataclasses.replace(default, rank=r, alpha=a) for r, a in ((4, 8.0), (16, 8.0), (8, 32.0))]
    return {
        "rank": default.rank,
        "alpha": float(default.alpha),
        "targets": list(default.targets),
        "scales": [float(c.scale) for c in (default, *variants)],
    }


def candidate_lora_config(env):
    return reference_lora_config(env)

