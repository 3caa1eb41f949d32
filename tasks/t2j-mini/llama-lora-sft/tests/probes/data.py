"""llama-lora-sft: the LoRA config, the tokenizer, the chat template, encoding, the split and batch order."""

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
}


def _cfgs(env):
    from llama_sft.config import TrainConfig, load_model_config

    return load_model_config(env.assets / "config.json"), TrainConfig().lora()


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
