"""Driver sources run against the candidate by `grading.run_candidate` (torch-free, offline).

Each driver is plain Python executed after the prelude of `grading_run.py` (INPUTS, PARAMS, APP,
ASSETS, save, record, section). They call only the public interface instruction.md names and
write outputs under the keys of the references in refs/.
"""

PROBES = r'''
import importlib
import os

with section("interface"):
    found = {}
    for module, names in PARAMS["interface"].items():
        try:
            mod = importlib.import_module(module)
        except Exception:
            found[module] = []
            continue
        found[module] = [n for n in names if hasattr(mod, n)]
    record("interface", found)

import jax
import jax.numpy as jnp
import numpy as np

from litgpt import lora as L
from litgpt import model as M
from litgpt import utils as U
from litgpt.scripts import convert_lit_checkpoint as C

cfg = L.Config.from_file(os.path.join(ASSETS, "model_config.yaml"), **PARAMS["lora"])
state = {k[3:]: v for k, v in INPUTS.items() if k.startswith("sd.")}

def flat(params):
    return C.state_dict_from_params(params)

with section("load"):
    for name, value in U.load_checkpoint(os.path.join(ASSETS, "lit_model.pth")).items():
        save("load." + name, value)

with section("convert"):
    params = C.params_from_state_dict(state, cfg)
    for name, value in flat(params).items():
        save("convert." + name, value)

with section("rope"):
    cos, sin = M.build_rope_cache(16, 12, 10000)
    save("rope.cos", cos); save("rope.sin", sin)
    cos2, sin2 = M.build_rope_cache(10, 8, 500)
    save("rope.cos_b500", cos2); save("rope.sin_b500", sin2)
    save("rope.apply", M.apply_rope(jnp.asarray(INPUTS["rope_x"]), cos2, sin2))

with section("rms_norm"):
    save("rms_norm", M.rms_norm(jnp.asarray(INPUTS["rms_x"]), jnp.asarray(INPUTS["rms_w"]), 1e-5))

with section("cross_entropy"):
    logits, targets = jnp.asarray(INPUTS["ce_logits"]), jnp.asarray(INPUTS["ce_targets"])
    record("ce.chunked", float(U.chunked_cross_entropy(logits, targets)))
    record("ce.chunked_list", float(U.chunked_cross_entropy(list(jnp.split(logits, [3, 6], axis=1)), targets)))
    record("ce.plain", float(U.chunked_cross_entropy(logits, targets, chunk_size=0)))

with section("forward"):
    params = C.params_from_state_dict(state, cfg)
    base = C.params_from_state_dict({k.replace(".linear.", "."): v for k, v in state.items() if "lora_" not in k}, cfg)
    for i in range(len(PARAMS["shapes"])):
        idx = jnp.asarray(INPUTS[f"idx.{i}"])
        save(f"forward.base.{i}", M.gpt_forward(base, cfg, idx))
        save(f"forward.lora.{i}", L.gpt_forward(params, cfg, idx))

with section("merge"):
    merged = L.merge_lora_weights(C.params_from_state_dict(state, cfg), cfg)
    for name, value in flat(merged).items():
        if name.endswith("linear.weight"):
            save("merge." + name, value)
    record("merge.leftover", sorted(n for n in flat(merged) if "lora_" in n))
    for i in range(len(PARAMS["shapes"])):
        save(f"forward.merged.{i}", L.gpt_forward(merged, cfg, jnp.asarray(INPUTS[f"idx.{i}"])))

with section("trainable"):
    mask = L.mark_only_lora_as_trainable(C.params_from_state_dict(state, cfg))
    record("trainable", sorted(n for n, v in flat(mask).items() if bool(v)))
    record("lora_filter", [bool(L.lora_filter(n, None)) for n in sorted(state)])

with section("lora_init"):
    base_params = C.params_from_state_dict({k: v for k, v in state.items() if "lora_" not in k}, cfg)
    spreads = []
    for seed in range(PARAMS["init_draws"]):
        initialised = flat(L.init_lora(base_params, cfg, jax.random.PRNGKey(seed)))
        scaled = [np.asarray(v).ravel() * np.sqrt(v.shape[1]) for n, v in initialised.items() if n.endswith("lora_A")]
        spreads.append(float(np.concatenate(scaled).std()) if scaled else float("nan"))
        if seed == 0:
            for name, value in initialised.items():
                if "lora_" in name:
                    save("init." + name, value)
    record("init.spreads", spreads)

from litgpt.finetune import lora as F

targs = F.TrainArgs(learning_rate=PARAMS["train"]["learning_rate"], weight_decay=PARAMS["train"]["weight_decay"],
                    betas=tuple(PARAMS["train"]["betas"]), eps=PARAMS["train"]["eps"],
                    warmup_steps=PARAMS["train"]["warmup_steps"], max_steps=PARAMS["train"]["max_steps"],
                    micro_batch_size=PARAMS["train"]["micro_batch_size"])
data = dict(np.load(os.path.join(ASSETS, "finetune.npz")))
mb = targs.micro_batch_size

with section("schedule"):
    schedule = F.get_lr_scheduler(targs.learning_rate, targs.warmup_steps, targs.max_steps)
    save("schedule.lr", np.array([float(schedule(i)) for i in range(targs.max_steps)]))

with section("grads"):
    params = C.params_from_state_dict(state, cfg)
    ids, labels = jnp.asarray(data["train_input_ids"][:mb]), jnp.asarray(data["train_labels"][:mb])
    loss, grads = jax.value_and_grad(F.loss_fn)(params, cfg, ids, labels)
    record("loss.value", float(loss))
    for name, value in flat(grads).items():
        if "lora_" in name:
            save("grads." + name, value)

with section("steps"):
    params = C.params_from_state_dict(state, cfg)
    optimizer = F.make_optimizer(params, targs)
    opt_state = optimizer.init(params)
    step = F.make_train_step(cfg, optimizer)
    losses = []
    for i in range(PARAMS["steps"]):
        rows = slice(i * mb, (i + 1) * mb)
        params, opt_state, loss = step(params, opt_state, jnp.asarray(data["train_input_ids"][rows]),
                                       jnp.asarray(data["train_labels"][rows]))
        losses.append(float(loss))
    record("steps.loss", losses)
    after = flat(params)
    for name, value in after.items():
        if "lora_" in name:
            save("steps." + name, value)
    frozen = [n for n in state if "lora_" not in n]
    record("steps.base_unchanged", float(np.mean([np.array_equal(after.get(n), state[n]) for n in frozen])))
'''

FIT = r'''
import os
import time

import numpy as np

from litgpt import lora as L
from litgpt.finetune import lora as F
from litgpt.scripts import convert_lit_checkpoint as C

with section("fit"):
    cfg = L.Config.from_file(os.path.join(ASSETS, "model_config.yaml"), **PARAMS["lora"])
    state = {k[3:]: v for k, v in INPUTS.items() if k.startswith("sd.") and "lora_" not in k}
    state.update({k[len("fit_init."):]: v for k, v in INPUTS.items() if k.startswith("fit_init.")})
    t = PARAMS["train"]
    targs = F.TrainArgs(learning_rate=t["learning_rate"], weight_decay=t["weight_decay"], betas=tuple(t["betas"]),
                        eps=t["eps"], warmup_steps=t["warmup_steps"], max_steps=t["max_steps"],
                        micro_batch_size=t["micro_batch_size"])
    start = time.monotonic()
    params, metrics = F.fit(C.params_from_state_dict(state, cfg), cfg, dict(np.load(os.path.join(ASSETS, "finetune.npz"))), targs)
    record("fit.seconds", time.monotonic() - start)
    record("fit.train_loss", [float(v) for v in metrics["train_loss"]])
    record("fit.lr", [float(v) for v in metrics["learning_rate"]])
    record("fit.val_loss", float(metrics["val_loss"]))
    for name, value in C.state_dict_from_params(params).items():
        if "lora_" in name:
            save("fit." + name, value)
'''
