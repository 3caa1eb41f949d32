"""Driver programs the mlp-train grader runs against the candidate (inside the nested sandbox).

Each is plain Python source executed after `grading.py`'s prelude (INPUTS, PARAMS, APP,
ASSETS, save, record, section). They call the public interface the instruction names
and never see the references.
"""

# Modules and names of the public interface (mirrors the original's layout).
INTERFACE = {
    "mlp_train.config": ["ModelConfig", "TrainConfig"],
    "mlp_train.data": ["Dataset", "load_dataset", "split_dataset", "fit_normalizer", "prepare_data",
                       "iterate_batches", "batch_stream"],
    "mlp_train.model": ["apply", "hidden_states", "init_params"],
    "mlp_train.losses": ["cross_entropy"],
    "mlp_train.optim": ["lr_multiplier", "lr_at", "make_optimizer"],
    "mlp_train.checkpoint": ["load_checkpoint", "save_checkpoint", "to_state_dict", "from_state_dict"],
    "mlp_train.evaluate": ["evaluate"],
    "mlp_train.train": ["train", "loss_fn", "main"],
}

NUMERIC = r'''
import dataclasses, importlib, os
import numpy as np

with section("interface"):
    present = {}
    for module, names in PARAMS["interface"].items():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            if getattr(exc, "name", None) and exc.name.split(".")[0] in PARAMS["forbidden"]:
                raise
            mod = None
        for name in names:
            present[f"{module}.{name}"] = bool(mod is not None and hasattr(mod, name))
    record("interface", present)

import jax, jax.numpy as jnp
from mlp_train import checkpoint, config, data, losses, model, optim


def compiled(fn, static_argnums):
    """fn under jax.jit (one compilation instead of many eager ones); eager if it does not trace."""
    jitted = jax.jit(fn, static_argnums=static_argnums)

    def call(*args):
        try:
            return jitted(*args)
        except Exception:
            return fn(*args)

    return call
MC, TC = config.ModelConfig(), config.TrainConfig()
INIT = os.path.join(ASSETS, "init.safetensors")
DATA = os.path.join(ASSETS, "dataset.npz")

with section("convert"):
    params = checkpoint.load_checkpoint(INIT)
    for key, value in checkpoint.to_state_dict(params).items():
        save(f"sd/{key}", np.asarray(value))

with section("data"):
    train_ds, val_ds, norm = data.prepare_data(DATA, TC)
    save("data/train_x", train_ds.x); save("data/train_y", train_ds.y)
    save("data/val_x", val_ds.x); save("data/val_y", val_ds.y)
    save("data/mean", norm.mean); save("data/std", norm.std)

with section("batches"):
    for epoch in (0, 1):
        ys = [y for _, y in data.iterate_batches(train_ds, TC.batch_size, TC.data_seed, epoch)]
        save(f"data/batches_e{epoch}", np.concatenate(ys))
    save("data/first_batch_x", next(data.batch_stream(train_ds, TC.batch_size, TC.data_seed))[0])

with section("schedule"):
    save("schedule/lr", np.array([optim.lr_at(s, TC) for s in range(TC.total_steps + 5)]))

with section("hidden"):
    hidden_states = compiled(model.hidden_states, (2,))
    for n in PARAMS["hidden_inputs"]:
        for i, h in enumerate(hidden_states(params, jnp.asarray(INPUTS[f"x_{n}"]), MC)):
            save(f"hidden/{n}/{i}", np.asarray(h))

with section("forward"):
    forward = compiled(model.apply, (2,))
    for n in PARAMS["logit_inputs"]:
        save(f"logits/{n}", np.asarray(forward(params, jnp.asarray(INPUTS[f"x_{n}"]), MC)))

with section("loss"):
    cross_entropy = compiled(losses.cross_entropy, (2,))
    for s in (0.0, 0.1):
        ce = cross_entropy(jnp.asarray(INPUTS["ce_logits"]), jnp.asarray(INPUTS["ce_labels"]), s)
        save(f"ce/{s}", np.asarray(ce))

with section("grad"):
    from mlp_train import train as train_mod
    loss, grads = compiled(jax.value_and_grad(train_mod.loss_fn), (3, 4))(
        params, jnp.asarray(INPUTS["grad_x"]), jnp.asarray(INPUTS["grad_y"]), MC, TC)
    save("grad/loss", np.asarray(loss))
    for key, value in checkpoint.to_state_dict(grads).items():
        save(f"grad/{key}", np.asarray(value))

with section("evaluate"):
    from mlp_train import evaluate as evaluate_mod
    ev = evaluate_mod.evaluate(params, val_ds, MC)
    save("eval/loss", np.asarray(ev["loss"])); save("eval/accuracy", np.asarray(ev["accuracy"]))

with section("trajectory"):
    from mlp_train import train as train_mod
    out = "/scratch/trajectory" if os.path.isdir("/scratch") else os.path.join(os.getcwd(), "trajectory")
    m = train_mod.train(DATA, INIT, out, dataclasses.replace(MC, dropout=0.0), TC,
                        max_steps=PARAMS["trajectory_steps"])
    save("traj/loss", np.asarray(m["train_loss"], dtype=np.float64))
    save("traj/lr", np.asarray(m["lr"], dtype=np.float64))
    for key, value in checkpoint.to_state_dict(checkpoint.load_checkpoint(os.path.join(out, "final.safetensors"))).items():
        save(f"traj/final/{key}", np.asarray(value))
'''

END_TO_END = r'''
import json, os, subprocess, sys, time
import numpy as np

def read_safetensors(path):
    """Parse a safetensors file with numpy only (the grader trusts no candidate reader)."""
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[key] = np.frombuffer(blob[start:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out

with section("run"):
    out = os.path.join(os.getcwd(), "e2e")
    argv = [sys.executable, "-m", "mlp_train.train", "--data", os.path.join(ASSETS, "dataset.npz"),
            "--init", os.path.join(ASSETS, "init.safetensors"), "--out", out]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=APP, capture_output=True, text=True, timeout=PARAMS["budget_s"])
        record("returncode", proc.returncode)
        record("stderr_tail", proc.stderr[-3000:])
    except subprocess.TimeoutExpired:
        record("returncode", 124)
    record("wall_s", time.monotonic() - started)

with section("outputs"):
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    record("metrics", {k: metrics.get(k) for k in ("train_loss", "lr", "val_loss", "val_accuracy")})
    for key, value in read_safetensors(os.path.join(out, "final.safetensors")).items():
        save(f"ckpt/{key}", value)
'''
