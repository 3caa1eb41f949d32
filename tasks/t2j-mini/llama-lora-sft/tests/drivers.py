"""Driver sources run against the candidate by `grading.run_candidate` (torch-free, offline).

Each driver is plain Python executed after the prelude of `grading.py` (INPUTS, PARAMS, APP,
ASSETS, save, record, section). They call only the public interface that instruction.md
names, and write outputs under the keys the references in refs/ use.
"""

COMMON = r'''
import os as _os
import numpy as _np


def _flatten(tree, prefix=""):
    """Nested dicts/lists of arrays -> {"a.b.0.c": array}."""
    out = {}
    if isinstance(tree, dict):
        for k in sorted(tree):
            out.update(_flatten(tree[k], f"{prefix}{k}."))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = _np.asarray(tree)
    return out


def _unflatten_lora(prefix):
    """INPUTS "prefix.layers.{i}.{target}.{a|b}" -> the adapter pytree."""
    layers = {}
    for key, value in INPUTS.items():
        if key.startswith(prefix + "."):
            _, i, target, factor = key[len(prefix) + 1:].split(".")
            layers.setdefault(int(i), {}).setdefault(target, {})[factor] = value
    return {"layers": [layers[i] for i in sorted(layers)]}


def _write_adapter(prefix, path):
    from safetensors.numpy import save_file
    save_file({k[len(prefix) + 1:]: v for k, v in INPUTS.items() if k.startswith(prefix + ".")}, path)
'''

PROBES = COMMON + r'''
import importlib

with section("interface"):
    found = {}
    for module, names in PARAMS["interface"].items():
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # a missing module is data, not a crash of the driver
            found[module] = []
            continue
        found[module] = [n for n in names if hasattr(mod, n)]
    record("interface", found)

import jax
import jax.numpy as jnp
from llama_sft.config import LoraConfig, ModelConfig, TrainConfig, load_model_config

cfg = load_model_config(_os.path.join(ASSETS, "config.json"))
lcfg = LoraConfig(rank=PARAMS["lora_rank"], alpha=PARAMS["lora_alpha"])
scale = float(lcfg.scale)
record("lora_scale", scale)
layer = {k[len("layer."):]: jnp.asarray(v) for k, v in INPUTS.items() if k.startswith("layer.")}
adapter = _unflatten_lora("adapter")["layers"][0]

with section("tokenizer"):
    from llama_sft.tokenizer import ByteTokenizer
    tok = ByteTokenizer(cfg.vocab_size)
    record("tok.encode", [list(tok.encode(s)) for s in PARAMS["strings"]])
    record("tok.decode", [tok.decode(ids) for ids in PARAMS["decode_ids"]])
    record("tok.specials", [tok.bos_id, tok.eos_id, tok.pad_id, tok.user_id, tok.assistant_id])

with section("template"):
    from llama_sft.template import prompt_ids, response_ids
    record("template.prompt", [list(prompt_ids(tok, r["prompt"])) for r in PARAMS["records"]])
    record("template.response", [list(response_ids(tok, r["response"])) for r in PARAMS["records"]])

with section("data"):
    from llama_sft import data
    tc = TrainConfig(**PARAMS["train_config"])
    recs = data.load_jsonl(_os.path.join(ASSETS, "sft_data.jsonl"))
    train, val = data.split_train_val(recs, tc.val_fraction, tc.split_seed)
    record("data.split", [len(recs), len(train), len(val)])
    record("data.val_prompts", [r["prompt"] for r in val])
    enc = [data.encode_example(tok, r, tc.max_seq_len) for r in PARAMS["records"]]
    record("data.encode", [[[int(i) for i in ids], [int(l) for l in labels]] for ids, labels in enc])
    batch = data.collate(enc, tc.max_seq_len, tok.pad_id)
    save("data.collate.input_ids", batch["input_ids"])
    save("data.collate.labels", batch["labels"])
    record("data.batches", [[int(i) for i in b] for b in data.batch_schedule(len(train), tc.batch_size, tc.total_steps, tc.seed)])

with section("schedule"):
    from llama_sft.optim import lr_schedule
    sched = lr_schedule(TrainConfig(**PARAMS["train_config"]))
    save("schedule.lr", _np.array([float(sched(s)) for s in range(PARAMS["train_config"]["total_steps"] + 2)]))

with section("rms_norm"):
    from llama_sft.modeling.norm import rms_norm
    norm = jax.jit(lambda x, w: rms_norm(x, w, cfg.norm_eps))
    for i in range(PARAMS["norm_cases"]):
        save(f"rms_norm.{i}", norm(jnp.asarray(INPUTS[f"rms_norm.{i}"]), layer["attn_norm"]))

with section("rope"):
    from llama_sft.modeling.rotary import apply_rotary, rope_cos_sin
    for i in range(PARAMS["rope_cases"]):
        cos, sin = rope_cos_sin(jnp.asarray(INPUTS[f"rope.positions.{i}"]), cfg.head_dim, cfg.rope_theta)
        save(f"rope.cos.{i}", cos)
        save(f"rope.sin.{i}", sin)

with section("rotary"):
    save("rotary.apply", jax.jit(apply_rotary)(jnp.asarray(INPUTS["rotary.x"]), jnp.asarray(INPUTS["rotary.cos"]), jnp.asarray(INPUTS["rotary.sin"])))

with section("attention"):
    from llama_sft.modeling.attention import attention
    attn_lora = jax.jit(lambda x, c, s: attention(layer, adapter, x, c, s, cfg, scale))
    attn_base = jax.jit(lambda x, c, s: attention(layer, None, x, c, s, cfg, scale))
    for i in range(PARAMS["attn_cases"]):
        x, cos, sin = (jnp.asarray(INPUTS[f"attn.{n}.{i}"]) for n in ("x", "cos", "sin"))
        save(f"attn.lora.{i}", attn_lora(x, cos, sin))
        if i in PARAMS["base_cases"]["attn"]:
            save(f"attn.base.{i}", attn_base(x, cos, sin))

with section("mlp"):
    from llama_sft.modeling.mlp import swiglu
    mlp_lora = jax.jit(lambda x: swiglu(layer, adapter, x, scale))
    mlp_base = jax.jit(lambda x: swiglu(layer, None, x, scale))
    for i in range(PARAMS["mlp_cases"]):
        x = jnp.asarray(INPUTS[f"mlp.x.{i}"])
        save(f"mlp.lora.{i}", mlp_lora(x))
        if i in PARAMS["base_cases"]["mlp"]:
            save(f"mlp.base.{i}", mlp_base(x))

with section("lora_linear"):
    from llama_sft.lora import lora_linear
    save("lora_linear", lora_linear(jnp.asarray(INPUTS["lora_linear.x"]), layer["q_proj"], adapter["q_proj"], scale))

with section("lora_init"):
    from llama_sft.lora import init_lora
    for k, v in _flatten(jax.jit(lambda key: init_lora(key, cfg, lcfg))(jax.random.key(PARAMS["init_seed"]))).items():
        save(f"init.{k}", v)

params = None
with section("convert"):
    from llama_sft.checkpoint import load_checkpoint
    params = load_checkpoint(ASSETS, cfg)
    for k, v in _flatten(params).items():
        save(f"convert.{k}", v)

test_lora = None
with section("adapter_io"):
    from llama_sft.checkpoint import load_adapter, save_adapter
    from safetensors.numpy import load_file
    _write_adapter("adapter_file", _SCRATCH + "/test_adapter.safetensors")
    test_lora = load_adapter(_SCRATCH + "/test_adapter.safetensors", cfg, lcfg)
    for k, v in _flatten(test_lora).items():
        save(f"adapter_io.load.{k}", v)
    save_adapter(_unflatten_lora("adapter"), _SCRATCH + "/saved_adapter.safetensors")
    for k, v in load_file(_SCRATCH + "/saved_adapter.safetensors").items():
        save(f"adapter_io.save.{k}", v)

with section("forward"):
    from llama_sft.modeling.llama import forward
    fwd = jax.jit(lambda p, l, ids: forward(p, l, ids, cfg, scale))
    fwd_base = jax.jit(lambda p, ids: forward(p, None, ids, cfg, scale))
    for i in range(PARAMS["forward_cases"]):
        if i in PARAMS["base_cases"]["forward"]:
            save(f"forward.base.{i}", fwd_base(params, jnp.asarray(INPUTS[f"forward.ids.{i}"])))
        save(f"forward.lora.{i}", fwd(params, test_lora, jnp.asarray(INPUTS[f"forward.ids.{i}"])))

with section("loss"):
    from llama_sft.loss import sft_loss, token_nll
    logits, labels = jnp.asarray(INPUTS["loss.logits"]), jnp.asarray(INPUTS["loss.labels"])
    total, count = token_nll(logits, labels)
    record("loss.value", float(sft_loss(logits, labels)))
    record("loss.sum", float(total))
    record("loss.count", int(count))

with section("grads"):
    ids, labels = jnp.asarray(INPUTS["loss.input_ids"]), jnp.asarray(INPUTS["loss.labels"])
    grads = jax.jit(jax.grad(lambda l: sft_loss(forward(params, l, ids, cfg, scale), labels)))(_unflatten_lora("adapter"))
    for k, v in _flatten(grads).items():
        save(f"grads.{k}", v)

with section("steps"):
    from llama_sft.train import create_train_state, make_train_step
    pc = TrainConfig(**PARAMS["probe_train_config"])
    state = create_train_state(params, _unflatten_lora("init_adapter"), pc)
    before = {k: _np.array(v) for k, v in _flatten(state.params["base"]).items()}
    step = make_train_step(cfg, pc)
    losses, lrs, norms = [], [], []
    for s in range(INPUTS["steps.input_ids"].shape[0]):
        batch = {"input_ids": jnp.asarray(INPUTS["steps.input_ids"][s]), "labels": jnp.asarray(INPUTS["steps.labels"][s])}
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
        lrs.append(float(metrics["lr"]))
        norms.append(float(metrics["grad_norm"]))
    record("steps.loss", losses)
    record("steps.lr", lrs)
    record("steps.grad_norm", norms)
    for k, v in _flatten(state.params["lora"]).items():
        save(f"steps.lora.{k}", v)
    after = _flatten(state.params["base"])
    unchanged = [float(_np.mean(_np.asarray(after[k]) == before[k])) if k in after else 0.0 for k in before]
    record("steps.base_unchanged", float(_np.mean(unchanged)) if unchanged else 0.0)
'''

TRAIN = COMMON + r'''
import json
import subprocess
import sys
import time

from safetensors.numpy import load_file

_write_adapter("init_adapter_file", _SCRATCH + "/init_adapter.safetensors")
with open(_SCRATCH + "/train_config.json", "w") as fh:
    json.dump(PARAMS["train_config"], fh)

# Both runs start at once (each is mostly single-threaded compilation and small steps);
# each is held to the time budget on its own.
runs = {}
for name, extra in (("fixed", ["--init-adapter", _SCRATCH + "/init_adapter.safetensors"]),
                    ("own", ["--seed", str(PARAMS["own_seed"])])):
    argv = [sys.executable, "-m", "llama_sft.train", "--checkpoint-dir", ASSETS,
            "--data", _os.path.join(ASSETS, "sft_data.jsonl"), "--config", _SCRATCH + "/train_config.json",
            "--out", f"{_SCRATCH}/out_{name}", *extra]
    log = open(f"{_SCRATCH}/{name}.log", "w+")
    proc = subprocess.Popen(argv, cwd=APP, env=dict(_os.environ, PYTHONPATH=APP), stdout=log, stderr=subprocess.STDOUT)
    runs[name] = (proc, log, time.perf_counter())

for name, (proc, log, start) in runs.items():
    with section(f"train.{name}"):
        try:
            code = proc.wait(timeout=max(1.0, PARAMS["budget_s"] - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = 124
        record(f"train.{name}.wall_s", time.perf_counter() - start)
        record(f"train.{name}.returncode", code)
        log.seek(0)
        tail = log.read()[-3000:]
        if code != 0:
            raise RuntimeError("time budget exceeded" if code == 124 else f"training entry point failed (exit {code}): {tail}")
        out = f"{_SCRATCH}/out_{name}"
        with open(_os.path.join(out, "metrics.json")) as fh:
            record(f"train.{name}.metrics", json.load(fh))
        for k, v in load_file(_os.path.join(out, "adapter.safetensors")).items():
            save(f"train.{name}.adapter.{k}", v)
'''
