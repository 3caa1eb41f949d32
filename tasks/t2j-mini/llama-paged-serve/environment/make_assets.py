"""Build the raw checkpoint in assets/: a tiny Llama-style model trained briefly on template sentences.

Deterministic (fixed seeds, one thread). Writes assets/config.json and
assets/model.safetensors (Hugging Face parameter names, float32).

    python environment/make_assets.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "source"))

from paged_serve.attention import prefill_attention  # noqa: E402
from paged_serve.config import ModelConfig  # noqa: E402
from paged_serve.layers import apply_rotary  # noqa: E402
from paged_serve.model import LlamaForCausalLM  # noqa: E402
from paged_serve.tokenizer import ByteTokenizer  # noqa: E402

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 259,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 176,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 128,
    "pad_token_id": 256,
    "bos_token_id": 257,
    "eos_token_id": 258,
    "torch_dtype": "float32",
}

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the robot", "our team", "she", "he"]
VERBS = ["sat on", "looked at", "ran to", "found", "liked", "painted", "carried", "opened", "watched"]
OBJECTS = ["the mat", "a red box", "the garden", "the door", "a blue kite", "the river", "an apple", "the moon"]
ENDINGS = [".", " today.", " again.", " at night.", " with care."]
SEQ_LEN = 48
STEPS = 600
BATCH = 32


def corpus(rng: np.random.Generator, n: int) -> list[str]:
    pick = lambda xs: xs[rng.integers(len(xs))]  # noqa: E731
    return [f"{pick(SUBJECTS)} {pick(VERBS)} {pick(OBJECTS)}{pick(ENDINGS)}" for _ in range(n)]


def batch_tensors(texts: list[str], tok: ByteTokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(texts), SEQ_LEN), tok.pad_token_id, dtype=torch.long)
    lengths = torch.zeros(len(texts), dtype=torch.long)
    for i, text in enumerate(texts):
        seq = (tok.encode(text) + [tok.eos_token_id])[:SEQ_LEN]
        ids[i, : len(seq)] = torch.tensor(seq)
        lengths[i] = len(seq)
    return ids, lengths


def train_logits(model: LlamaForCausalLM, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The prefill computation without a cache, differentiable: [B, T] -> [B, T, vocab]."""
    c = model.config
    positions = torch.arange(tokens.shape[1])[None, :].expand_as(tokens)
    x = model.model.embed_tokens(tokens)
    for layer in model.model.layers:
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        q = apply_rotary(attn.q_proj(h).unflatten(-1, (c.n_heads, c.head_dim)), positions, c.rope_theta)
        k = apply_rotary(attn.k_proj(h).unflatten(-1, (c.n_kv_heads, c.head_dim)), positions, c.rope_theta)
        v = attn.v_proj(h).unflatten(-1, (c.n_kv_heads, c.head_dim))
        x = layer.finish(x, attn.o_proj(prefill_attention(q, k, v, lengths).flatten(-2)))
    return model.lm_head(model.model.norm(x))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    tok = ByteTokenizer()
    config = ModelConfig(**{"vocab_size": 259})  # defaults mirror CONFIG
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for step in range(STEPS):
        tokens, lengths = batch_tensors(corpus(rng, BATCH), tok)
        logits = train_logits(model, tokens, lengths)
        target = tokens[:, 1:].clone()
        target[torch.arange(SEQ_LEN - 1)[None, :] >= (lengths - 1)[:, None]] = -100
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, config.vocab_size), target.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"step {step} loss {loss.item():.4f}")
    out = HERE / "assets"
    out.mkdir(exist_ok=True)
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
