"""Seeded defects of the mlp-train oracle (tasks/t2j-mini/mlp-train/solution/app).

Each is a small, realistic slip of a PyTorch-to-JAX port of the MLP training package.
"""

from benchmark_adapter.grading.defects import Defect

DEFECTS: list[Defect] = [
    Defect(
        name="converter-imports-torch",
        file="mlp_train/checkpoint.py",
        old="import jax.numpy as jnp\n",
        new="import jax.numpy as jnp\nimport torch  # used to read the original checkpoint\n",
        component="checkpoint",
        description="The converter imports torch, so the candidate is not independent.",
    ),
    Defect(
        name="export-skips-transpose",
        file="mlp_train/checkpoint.py",
        old='sd["head.weight"] = np.asarray(params["head"]["kernel"]).T',
        new='sd["head.weight"] = np.asarray(params["head"]["kernel"])',
        component="checkpoint.save_checkpoint",
        description="Saved checkpoints keep the head kernel [in, out], not the original [out, in].",
    ),
    Defect(
        name="converter-norm-swap",
        file="mlp_train/checkpoint.py",
        old='"norm": {"scale": jnp.asarray(sd[f"blocks.{i}.norm.weight"]),\n'
        '                     "bias": jnp.asarray(sd[f"blocks.{i}.norm.bias"])},',
        new='"norm": {"scale": jnp.asarray(sd[f"blocks.{i}.norm.bias"]),\n'
        '                     "bias": jnp.asarray(sd[f"blocks.{i}.norm.weight"])},',
        component="checkpoint.load_checkpoint",
        description="The converter maps LayerNorm weight and bias the wrong way round.",
    ),
    Defect(
        name="interface-renamed",
        file="mlp_train/model.py",
        old="def hidden_states(",
        new="def block_outputs(",
        component="model.MLPClassifier.hidden_states",
        description="A public function of the original is renamed in the port.",
    ),
    Defect(
        name="gelu-tanh-approximation",
        file="mlp_train/model.py",
        old="cfg.norm_eps), approximate=False)",
        new="cfg.norm_eps))",
        component="model.MLPBlock",
        description="jax.nn.gelu's default tanh approximation instead of torch's exact GELU.",
    ),
    Defect(
        name="layernorm-eps-flax-default",
        file="mlp_train/model.py",
        old="return (x - mean) * jax.lax.rsqrt(var + eps)",
        new="return (x - mean) * jax.lax.rsqrt(var + 1e-6)",
        component="model.MLPBlock.norm",
        description="LayerNorm uses Flax's default epsilon 1e-6 instead of the configured 1e-5.",
    ),
    Defect(
        name="dropout-on-at-eval",
        file="mlp_train/evaluate.py",
        old="logits = apply(params, jnp.asarray(ds.x), cfg, train=False)",
        new="logits = apply(params, jnp.asarray(ds.x), cfg, train=True, rng=jax.random.PRNGKey(0))",
        component="evaluate.evaluate",
        description="Evaluation runs the model in training mode, with dropout on.",
    ),
    Defect(
        name="label-smoothing-k-minus-1",
        file="mlp_train/losses.py",
        old="+ label_smoothing / n_classes",
        new="+ label_smoothing / (n_classes - 1)",
        component="losses.cross_entropy",
        description="Smoothing mass spread over K-1 classes instead of torch's K.",
    ),
    Defect(
        name="loss-sum-reduction",
        file="mlp_train/losses.py",
        old="return jnp.mean(per_example)",
        new="return jnp.sum(per_example)",
        component="losses.cross_entropy",
        description="The loss is summed over the batch instead of averaged.",
    ),
    Defect(
        name="warmup-off-by-one",
        file="mlp_train/optim.py",
        old="return (step + 1) / cfg.warmup_steps",
        new="return step / cfg.warmup_steps",
        component="optim.lr_multiplier",
        description="Warmup starts at lr 0 (one step late) instead of lr/warmup.",
    ),
    Defect(
        name="cosine-ignores-min-lr",
        file="mlp_train/optim.py",
        old="return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine",
        new="return cosine",
        component="optim.lr_multiplier",
        description="The cosine decays to zero instead of to min_lr_ratio.",
    ),
    Defect(
        name="weight-decay-on-all-params",
        file="mlp_train/optim.py",
        old="weight_decay=cfg.weight_decay, mask=decay_mask,",
        new="weight_decay=cfg.weight_decay,",
        component="optim.param_groups",
        description="Weight decay also applies to biases and LayerNorm parameters.",
    ),
    Defect(
        name="no-grad-clipping",
        file="mlp_train/optim.py",
        old="        optax.clip_by_global_norm(cfg.grad_clip),\n",
        new="",
        # The original clips in its training loop (clip_grad_norm_ in train.train),
        # wherever the candidate put it.
        component="train.train",
        description="Gradient clipping by global norm is dropped.",
    ),
    Defect(
        name="same-shuffle-every-epoch",
        file="mlp_train/data.py",
        old="perm = np.random.default_rng((seed, epoch)).permutation(len(ds))",
        new="perm = np.random.default_rng(seed).permutation(len(ds))",
        component="data.iterate_batches",
        description="Every epoch sees the batches in the same order.",
    ),
    Defect(
        name="normalize-with-all-data",
        file="mlp_train/data.py",
        old="norm = fit_normalizer(train.x)",
        new="norm = fit_normalizer(ds.x)",
        component="data.prepare_data",
        description="Normalization statistics come from the whole dataset, validation included.",
    ),
    Defect(
        name="split-from-the-end",
        file="mlp_train/data.py",
        old="val_idx, train_idx = perm[:n_val], perm[n_val:]",
        new="train_idx, val_idx = perm[: n - n_val], perm[n - n_val :]",
        component="data.split_dataset",
        description="The validation split is taken from the end of the permutation.",
    ),
]
