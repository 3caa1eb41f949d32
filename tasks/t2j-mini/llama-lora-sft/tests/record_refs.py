"""Record the inputs and frozen references of llama-lora-sft from the PyTorch original.

Run by task authors, with torch installed (never by the grader):

    python tests/record_refs.py

Writes tests/inputs/ (inputs.npz, params.json, train_config.json) and tests/refs/
(refs.npz, refs.json, VERSIONS.json). Every reference comes from the original in
environment/source, run in float32 on CPU; any change to the original means re-running this.
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TASK = Path(__file__).resolve().parents[1]
SOURCE = TASK / "environment" / "source"
ASSETS = TASK / "environment" / "assets"
TESTS = TASK / "tests"
sys.path.insert(0, str(SOURCE))

import torch  # noqa: E402
from llama_sft import data  # noqa: E402
from llama_sft.checkpoint import load_checkpoint  # noqa: E402
from llama_sft.config import LoraConfig, TrainConfig, load_model_config, load_train_config  # noqa: E402
from llama_sft.lora import apply_lora, lora_modules, trainable_parameters  # noqa: E402
from llama_sft.loss import sft_loss, token_nll  # noqa: E402
from llama_sft.modeling.norm import RMSNorm  # noqa: E402
from llama_sft.modeling.rotary import apply_rotary, rope_cos_sin  # noqa: E402
from llama_sft.optim import build_optimizer, lr_multiplier  # noqa: E402
from llama_sft.template import prompt_ids, response_ids  # noqa: E402
from llama_sft.tokenizer import ByteTokenizer  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

SEED = 2026
TEST_ADAPTER_SEED = 3
INIT_ADAPTER_SEED = 11
INIT_STAT_SEEDS = range(10)
OWN_INIT_SEEDS = (0, 1, 2, 3, 4)
WALL_REPEATS = 2
BAND_STDS = 3.0
# A short, aggressive optimizer probe: large rate and decay, clipping active, warmup visible.
PROBE_TRAIN = {
    "learning_rate": 0.01, "weight_decay": 0.1, "warmup_steps": 2, "total_steps": 6,
    "batch_size": 4, "max_seq_len": 64, "seed": 0,
}
STRINGS = ["hello", "  spaced out  ", "naïve café ☕", "", "tab\tand\nnewline", "<|eos|> literal"]
DECODE_IDS = [[104, 105, 256, 257], [0xE2, 0x98, 0x95, 258], [255, 259, 65, 260]]
PROBE_RECORDS = [
    {"prompt": "Reverse the word: apple", "response": "elppa"},
    {"prompt": "  Add 3 and 4.\n", "response": " 7 "},
    {"prompt": "Uppercase: " + "velvet " * 6, "response": ("VELVET " * 6).strip()},
]
NORM_SCALES = (1e-3, 1.0, 30.0)
ROPE_POSITIONS = ((0, 9), (5, 17))
ATTN_SHAPES = ((1, 1), (2, 7), (3, 33))
MLP_SHAPES = ((2, 7), (1, 33))
FORWARD_SHAPES = ((1, 1), (2, 16), (4, 48))
BLOCK_WEIGHTS = {
    "attn_norm": "attn_norm.weight", "q_proj": "attn.q_proj.weight", "k_proj": "attn.k_proj.weight",
    "v_proj": "attn.v_proj.weight", "o_proj": "attn.o_proj.weight", "mlp_norm": "mlp_norm.weight",
    "gate_proj": "mlp.gate_proj.weight", "up_proj": "mlp.up_proj.weight", "down_proj": "mlp.down_proj.weight",
}


def np32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def converted(model) -> dict[str, np.ndarray]:
    """The base weights in the JAX layout the instruction prescribes ([in, out] kernels).

    Not a function of the original: the original's own weights (its `load_checkpoint`), laid out
    as the instruction names them.
    """
    sd = model.state_dict()
    out = {"embed": np32(sd["embed.weight"]), "final_norm": np32(sd["final_norm.weight"]),
           "lm_head": np32(sd["lm_head.weight"]).T.copy()}
    for i in range(model.cfg.n_layers):
        for name, key in BLOCK_WEIGHTS.items():
            w = np32(sd[f"layers.{i}.{key}"])
            out[f"layers.{i}.{name}"] = w if w.ndim == 1 else w.T.copy()
    return out


def adapter_arrays(model, lcfg: LoraConfig, grads: bool = False) -> tuple[dict, dict]:
    """(torch-layout file tensors, JAX-layout pytree paths) of the LoRA factors (or their grads)."""
    file, tree = {}, {}
    for name, mod in lora_modules(model, lcfg).items():
        a = mod.lora_A.grad if grads else mod.lora_A
        b = mod.lora_B.grad if grads else mod.lora_B
        file[f"{name}.lora_A"], file[f"{name}.lora_B"] = np32(a), np32(b)
        tree[f"{name}.a"], tree[f"{name}.b"] = np32(a).T.copy(), np32(b).T.copy()
    return file, tree


def lora_model(cfg, lcfg, seed: int):
    model = load_checkpoint(ASSETS, cfg)
    torch.manual_seed(seed)
    apply_lora(model, lcfg)
    return model


def pooled_init_std(model, lcfg) -> float:
    """std of all A entries divided by their bound 1/sqrt(in) (1/sqrt(3) for U(-b, b))."""
    vals = [np32(m.lora_A).ravel() * np.sqrt(m.lora_A.shape[1]) for m in lora_modules(model, lcfg).values()]
    return float(np.concatenate(vals).std())


def spread_band(samples: list[float]) -> float:
    """Half-width of the original's own run-to-run variation: three sample standard deviations."""
    return float(BAND_STDS * np.std(np.asarray(samples, dtype=np.float64), ddof=1))


def run_cli(config_path: Path, out: Path, extra: list[str]) -> tuple[dict, float, float, dict]:
    """Run the original's entry point; returns (metrics, wall s, CPU s, trained adapter)."""
    argv = [sys.executable, "-m", "llama_sft.train", "--checkpoint-dir", str(ASSETS),
            "--data", str(ASSETS / "sft_data.jsonl"), "--config", str(config_path), "--out", str(out), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=SOURCE, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    from safetensors.numpy import load_file

    return json.loads((out / "metrics.json").read_text()), wall, cpu, load_file(str(out / "adapter.safetensors"))


def main() -> None:
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    cfg = load_model_config(ASSETS / "config.json")
    lcfg = LoraConfig()
    train_cfg = load_train_config(SOURCE / "configs" / "sft_tiny.json")
    tok = ByteTokenizer(cfg.vocab_size)
    inputs: dict[str, np.ndarray] = {}
    refs: dict[str, np.ndarray] = {}
    values: dict = {}

    base = load_checkpoint(ASSETS, cfg)
    base.eval()
    for path, arr in converted(base).items():
        refs[f"convert.{path}"] = arr
        if path.startswith("layers.0."):
            inputs[f"layer.{path.removeprefix('layers.0.')}"] = arr

    test_model = lora_model(cfg, lcfg, TEST_ADAPTER_SEED)
    with torch.no_grad():
        for mod in lora_modules(test_model, lcfg).values():
            mod.lora_B.normal_(0.0, 0.05)
    file, tree = adapter_arrays(test_model, lcfg)
    inputs.update({f"adapter_file.{k}": v for k, v in file.items()})
    inputs.update({f"adapter.{k}": v for k, v in tree.items()})
    refs.update({f"adapter_io.load.{k}": v for k, v in tree.items()})
    refs.update({f"adapter_io.save.{k}": v for k, v in file.items()})

    with torch.no_grad():
        # L1 modules
        norm = RMSNorm(cfg.dim, cfg.norm_eps)
        norm.weight.copy_(torch.from_numpy(inputs["layer.attn_norm"]))
        for i, s in enumerate(NORM_SCALES):
            x = (rng.standard_normal((2, 5, cfg.dim)) * s).astype(np.float32)
            inputs[f"rms_norm.{i}"] = x
            refs[f"rms_norm.{i}"] = np32(norm(torch.from_numpy(x)))
        for i, (lo, hi) in enumerate(ROPE_POSITIONS):
            cos, sin = rope_cos_sin(torch.arange(lo, hi), cfg.head_dim, cfg.rope_theta)
            inputs[f"rope.positions.{i}"] = np.arange(lo, hi, dtype=np.int32)
            refs[f"rope.cos.{i}"], refs[f"rope.sin.{i}"] = np32(cos), np32(sin)
        cos, sin = rope_cos_sin(torch.arange(9), cfg.head_dim, cfg.rope_theta)
        x = rng.standard_normal((2, 9, cfg.n_heads, cfg.head_dim)).astype(np.float32)
        inputs.update({"rotary.x": x, "rotary.cos": np32(cos), "rotary.sin": np32(sin)})
        refs["rotary.apply"] = np32(apply_rotary(torch.from_numpy(x), cos, sin))
        for i, (b, t) in enumerate(ATTN_SHAPES):
            x = rng.standard_normal((b, t, cfg.dim)).astype(np.float32)
            cos, sin = rope_cos_sin(torch.arange(t), cfg.head_dim, cfg.rope_theta)
            inputs.update({f"attn.x.{i}": x, f"attn.cos.{i}": np32(cos), f"attn.sin.{i}": np32(sin)})
            refs[f"attn.lora.{i}"] = np32(test_model.layers[0].attn(torch.from_numpy(x), cos, sin))
            refs[f"attn.base.{i}"] = np32(base.layers[0].attn(torch.from_numpy(x), cos, sin))
        for i, (b, t) in enumerate(MLP_SHAPES):
            x = rng.standard_normal((b, t, cfg.dim)).astype(np.float32)
            inputs[f"mlp.x.{i}"] = x
            refs[f"mlp.lora.{i}"] = np32(test_model.layers[0].mlp(torch.from_numpy(x)))
            refs[f"mlp.base.{i}"] = np32(base.layers[0].mlp(torch.from_numpy(x)))
        x = rng.standard_normal((2, 7, cfg.dim)).astype(np.float32)
        inputs["lora_linear.x"] = x
        refs["lora_linear"] = np32(test_model.layers[0].attn.q_proj(torch.from_numpy(x)))
        values["lora_scale"] = lcfg.scale

        # L3 composed forward
        for i, (b, t) in enumerate(FORWARD_SHAPES):
            ids = rng.integers(0, 256 + 5, size=(b, t)).astype(np.int32)
            inputs[f"forward.ids.{i}"] = ids
            refs[f"forward.base.{i}"] = np32(base(torch.from_numpy(ids).long()))
            refs[f"forward.lora.{i}"] = np32(test_model(torch.from_numpy(ids).long()))

    # data pipeline
    records = data.load_jsonl(ASSETS / "sft_data.jsonl")
    train_recs, val_recs = data.split_train_val(records, train_cfg.val_fraction, train_cfg.split_seed)
    values["tok.encode"] = [tok.encode(s) for s in STRINGS]
    values["tok.decode"] = [tok.decode(ids) for ids in DECODE_IDS]
    values["tok.specials"] = [tok.bos_id, tok.eos_id, tok.pad_id, tok.user_id, tok.assistant_id]
    values["template.prompt"] = [prompt_ids(tok, r["prompt"]) for r in PROBE_RECORDS]
    values["template.response"] = [response_ids(tok, r["response"]) for r in PROBE_RECORDS]
    values["data.split"] = [len(records), len(train_recs), len(val_recs)]
    values["data.val_prompts"] = [r["prompt"] for r in val_recs]
    encoded = [data.encode_example(tok, r, train_cfg.max_seq_len) for r in PROBE_RECORDS]
    values["data.encode"] = [[ids, labels] for ids, labels in encoded]
    batch = data.collate(encoded, train_cfg.max_seq_len, tok.pad_id)
    refs["data.collate.input_ids"] = batch["input_ids"].numpy().astype(np.int32)
    refs["data.collate.labels"] = batch["labels"].numpy().astype(np.int32)
    values["data.batches"] = data.batch_schedule(
        len(train_recs), train_cfg.batch_size, train_cfg.total_steps, train_cfg.seed
    )
    # the rate of optimizer step s: the original's LambdaLR factor times the base rate, as its
    # scheduler's get_last_lr() gives it before step s (tested equal: tests/benchmark_adapter/test_llama_lora_sft.py)
    refs["schedule.lr"] = np.array(
        [train_cfg.learning_rate * lr_multiplier(s, train_cfg.warmup_steps, train_cfg.total_steps)
         for s in range(train_cfg.total_steps + 2)], dtype=np.float32)

    # L4 loss and gradients on a real batch (test adapter, B non-zero)
    train_enc = [data.encode_example(tok, r, train_cfg.max_seq_len) for r in train_recs]
    batch = data.collate(train_enc[:4], train_cfg.max_seq_len, tok.pad_id)
    inputs["loss.input_ids"] = batch["input_ids"].numpy().astype(np.int32)
    inputs["loss.labels"] = batch["labels"].numpy().astype(np.int32)
    logits = test_model(batch["input_ids"])
    loss = sft_loss(logits, batch["labels"])
    total, count = token_nll(logits, batch["labels"])
    inputs["loss.logits"] = np32(logits)
    values["loss.value"], values["loss.sum"], values["loss.count"] = loss.item(), total.item(), int(count)
    loss.backward()
    _, grads = adapter_arrays(test_model, lcfg, grads=True)
    refs.update({f"grads.{k}": v for k, v in grads.items()})

    # L1 LoRA initialisation statistics over seeds (the reference's own spread)
    stds = [pooled_init_std(lora_model(cfg, lcfg, s), lcfg) for s in INIT_STAT_SEEDS]
    values["init.std_mean"] = float(np.mean(stds))
    values["init.std_band"] = spread_band(stds)

    # L4 optimizer steps from a fresh adapter on fixed batches
    probe_cfg = TrainConfig(**PROBE_TRAIN)
    step_model = lora_model(cfg, lcfg, INIT_ADAPTER_SEED)
    init_file, init_tree = adapter_arrays(step_model, lcfg)
    inputs.update({f"init_adapter_file.{k}": v for k, v in init_file.items()})
    inputs.update({f"init_adapter.{k}": v for k, v in init_tree.items()})
    schedule = data.batch_schedule(len(train_enc), probe_cfg.batch_size, probe_cfg.total_steps, probe_cfg.seed)
    batches = [data.collate([train_enc[i] for i in idx], probe_cfg.max_seq_len, tok.pad_id) for idx in schedule]
    inputs["steps.input_ids"] = np.stack([b["input_ids"].numpy() for b in batches]).astype(np.int32)
    inputs["steps.labels"] = np.stack([b["labels"].numpy() for b in batches]).astype(np.int32)
    # Stand-in: the original's `train` loop, written out so that its steps run on exactly the
    # arrays handed to the candidate (steps.input_ids, steps.labels; `train` builds its batches
    # itself), with the same clipping, logging and steps (tested: `train` from the same adapter
    # gives these losses, rates, norms and factors; tests/benchmark_adapter/test_llama_lora_sft.py)
    params = trainable_parameters(step_model)
    optimizer, scheduler = build_optimizer(params, probe_cfg)
    losses, lrs, norms = [], [], []
    for b in batches:
        loss = sft_loss(step_model(b["input_ids"]), b["labels"])
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, probe_cfg.max_grad_norm)))
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    values["steps.loss"], values["steps.lr"], values["steps.grad_norm"] = losses, lrs, norms
    _, final = adapter_arrays(step_model, lcfg)
    refs.update({f"steps.lora.{k}": v for k, v in final.items()})

    # L5/L6 end-to-end runs of the original's entry point
    TESTS.joinpath("inputs").mkdir(exist_ok=True)
    config_path = TESTS / "inputs" / "train_config.json"
    config_path.write_text((SOURCE / "configs" / "sft_tiny.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        init_path = tmp / "init.safetensors"
        save_file(init_file, str(init_path))
        walls, cpus, vals = [], [], []
        for r in range(WALL_REPEATS):
            metrics, wall, cpu, adapter = run_cli(config_path, tmp / f"fixed{r}", ["--init-adapter", str(init_path)])
            walls.append(wall)
            cpus.append(cpu)
            vals.append(metrics["val_loss"])
        values["train.fixed.metrics"] = metrics
        values["train.fixed.val_band"] = float(max(vals) - min(vals))
        refs.update({f"train.fixed.adapter.{k}": v for k, v in adapter.items()})
        values["train.wall_s"] = float(min(walls))
        values["train.cpu_s"] = float(min(cpus))
        own = [run_cli(config_path, tmp / f"own{s}", ["--seed", str(s)])[0]["val_loss"] for s in OWN_INIT_SEEDS]
        values["train.own.val_losses"] = own
        values["train.own.val_mean"] = float(np.mean(own))
        values["train.own.val_band"] = spread_band(own)
        values["train.own.seed"] = OWN_INIT_SEEDS[0]

    params_json = {
        "strings": STRINGS, "decode_ids": DECODE_IDS, "records": PROBE_RECORDS,
        "train_config": json.loads(config_path.read_text()), "probe_train_config": PROBE_TRAIN,
        "lora_rank": lcfg.rank, "lora_alpha": lcfg.alpha,
        "norm_cases": len(NORM_SCALES), "rope_cases": len(ROPE_POSITIONS), "attn_cases": len(ATTN_SHAPES),
        "mlp_cases": len(MLP_SHAPES), "forward_cases": len(FORWARD_SHAPES), "init_seed": 0,
    }
    (TESTS / "inputs" / "params.json").write_text(json.dumps(params_json, indent=1))
    np.savez_compressed(TESTS / "inputs" / "inputs.npz", **inputs)
    TESTS.joinpath("refs").mkdir(exist_ok=True)
    np.savez_compressed(TESTS / "refs" / "refs.npz", **refs)
    (TESTS / "refs" / "refs.json").write_text(json.dumps(values, indent=1))
    versions = {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
                "machine": platform.machine(), "device": "cpu", "dtype": "float32"}
    (TESTS / "refs" / "VERSIONS.json").write_text(json.dumps(versions, indent=1) + "\n")
    print(json.dumps({"wall_s": values["train.wall_s"], "cpu_s": values["train.cpu_s"], "own_val": own,
                      "fixed_val": vals}))


if __name__ == "__main__":
    main()
