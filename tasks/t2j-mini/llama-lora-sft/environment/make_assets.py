"""Write the raw checkpoint and the SFT dataset into assets/, deterministically.

    python make_assets.py [--out assets]

Weights come from numpy's PCG64 generator with a fixed seed (no torch needed),
stored in float32 under Hugging Face Llama names with [out, in] linear weights.
The dataset is a fixed-seed mix of small string and arithmetic tasks.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

CONFIG = {
    "vocab_size": 264,
    "dim": 64,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "hidden_dim": 176,
    "norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_seq_len": 128,
}
WEIGHT_SEED = 20240501
DATA_SEED = 7
N_EXAMPLES = 480

WORDS = (
    "apple river stone cloud tiger lemon window garden rocket silver planet candle "
    "forest bridge marble orange pencil violin harbor meadow jacket spider copper "
    "island winter summer thunder butter castle dragon feather mirror needle pepper "
    "rabbit saddle tunnel velvet wagon yellow zebra anchor basket cotton desert "
    "engine falcon ginger hammer jungle kettle ladder magnet nickel oyster pirate"
).split()


def make_weights(cfg: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(WEIGHT_SEED)
    d, f, v = cfg["dim"], cfg["hidden_dim"], cfg["vocab_size"]
    hd = d // cfg["n_heads"]
    kv = cfg["n_kv_heads"] * hd

    def linear(out_f: int, in_f: int) -> np.ndarray:
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": rng.standard_normal((v, d)).astype(np.float32)}
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = norm()
        tensors[p + "self_attn.q_proj.weight"] = linear(d, d)
        tensors[p + "self_attn.k_proj.weight"] = linear(kv, d)
        tensors[p + "self_attn.v_proj.weight"] = linear(kv, d)
        tensors[p + "self_attn.o_proj.weight"] = linear(d, d)
        tensors[p + "post_attention_layernorm.weight"] = norm()
        tensors[p + "mlp.gate_proj.weight"] = linear(f, d)
        tensors[p + "mlp.up_proj.weight"] = linear(f, d)
        tensors[p + "mlp.down_proj.weight"] = linear(d, f)
    tensors["model.norm.weight"] = norm()
    tensors["lm_head.weight"] = (2.0 * rng.standard_normal((v, d)) / np.sqrt(d)).astype(np.float32)
    return tensors


def make_example(rng: random.Random) -> dict:
    kind = rng.randrange(6)
    w = rng.choice(WORDS)
    if kind == 0:
        return {"prompt": f"Reverse the word: {w}", "response": w[::-1]}
    if kind == 1:
        phrase = f"{w} {rng.choice(WORDS)}"
        return {"prompt": f"Uppercase: {phrase}", "response": phrase.upper()}
    if kind == 2:
        a, b = rng.randrange(100), rng.randrange(100)
        return {"prompt": f"Add {a} and {b}.", "response": str(a + b)}
    if kind == 3:
        return {"prompt": f"Repeat twice: {w}", "response": f"{w} {w}"}
    if kind == 4:
        return {"prompt": f"First letter of {w}?", "response": w[0]}
    return {"prompt": f"Count the letters in {w}.", "response": str(len(w))}


def make_dataset() -> list[dict]:
    rng = random.Random(DATA_SEED)
    return [make_example(rng) for _ in range(N_EXAMPLES)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "assets")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    save_file(make_weights(CONFIG), str(out / "model.safetensors"))
    with open(out / "sft_data.jsonl", "w", encoding="utf-8") as fh:
        for rec in make_dataset():
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
