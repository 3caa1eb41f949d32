"""LoRA fine-tuning: the learning-rate schedule, the optimizer, the loss, the train step and the loop.

As litgpt's `finetune/lora.py`: AdamW over the LoRA factors only (the base model frozen), a
linear warmup from 0 followed by cosine annealing to 0, the next-token loss over the labelled
positions (`labels` -100 elsewhere), micro-batches taken in order and cycled, one optimizer
step per micro-batch.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from litgpt.lora import Config, gpt_forward, mark_only_lora_as_trainable
from litgpt.utils import chunked_cross_entropy

Params = dict[str, Any]


class TrainArgs(NamedTuple):
    """The hyper-parameters of one fine-tuning run."""

    learning_rate: float = 2e-3
    weight_decay: float = 0.02
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 4
    max_steps: int = 24
    micro_batch_size: int = 4


def get_lr_scheduler(learning_rate: float, warmup_steps: int, max_steps: int):
    """lr(step): `learning_rate * step / warmup_steps` while warming up, then cosine to 0 at `max_steps`."""

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm = learning_rate * step / warmup_steps
        t = (step - warmup_steps) / (max_steps - warmup_steps)
        # (1 + cos(pi t)) / 2 as sin(pi (1 - t) / 2)^2: no cancellation near t = 1, and exactly 0 at max_steps
        cosine = learning_rate * jnp.sin(0.5 * jnp.pi * (1.0 - t)) ** 2
        return jnp.where(step < warmup_steps, warm, cosine)

    return schedule


def make_optimizer(params: Params, args: TrainArgs) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay) with the schedule, on the LoRA factors; zero updates elsewhere."""
    trainable = mark_only_lora_as_trainable(params)
    labels = jax.tree_util.tree_map(lambda t: "train" if t else "freeze", trainable)
    adamw = optax.adamw(
        get_lr_scheduler(args.learning_rate, args.warmup_steps, args.max_steps),
        b1=args.betas[0], b2=args.betas[1], eps=args.eps, weight_decay=args.weight_decay,
    )  # fmt: skip
    return optax.multi_transform({"train": adamw, "freeze": optax.set_to_zero()}, labels)


def loss_fn(params: Params, config: Config, input_ids: jax.Array, labels: jax.Array) -> jax.Array:
    """Output n predicts token n+1: the loss of `logits[:, :-1]` against `labels[:, 1:]`."""
    logits = gpt_forward(params, config, input_ids)
    return chunked_cross_entropy(logits[:, :-1], labels[:, 1:])


def make_train_step(config: Config, optimizer: optax.GradientTransformation):
    """A jitted `(params, opt_state, input_ids, labels) -> (params, opt_state, loss)`."""

    @jax.jit
    def train_step(params, opt_state, input_ids, labels):
        loss, grads = jax.value_and_grad(partial(loss_fn, config=config))(params, input_ids=input_ids, labels=labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def batches(input_ids: np.ndarray, labels: np.ndarray, micro_batch_size: int):
    """Micro-batches in order, cycled forever (the last partial one dropped)."""
    count = len(input_ids) // micro_batch_size
    while True:
        for i in range(count):
            rows = slice(i * micro_batch_size, (i + 1) * micro_batch_size)
            yield jnp.asarray(input_ids[rows]), jnp.asarray(labels[rows])


def validate(params: Params, config: Config, input_ids: np.ndarray, labels: np.ndarray, micro_batch_size: int) -> float:
    """The mean over the validation micro-batches of their losses."""
    loss = jax.jit(partial(loss_fn, config=config))
    count = max(1, len(input_ids) // micro_batch_size)
    values = [loss(params, input_ids=b[0], labels=b[1])
              for b, _ in zip(batches(input_ids, labels, micro_batch_size), range(count), strict=False)]  # fmt: skip
    return float(np.mean([float(v) for v in values]))


def fit(params: Params, config: Config, data: dict[str, np.ndarray], args: TrainArgs) -> tuple[Params, dict]:
    """Fine-tune `params`' LoRA factors for `args.max_steps` steps on `data["train_*"]`.

    Returns:
        The trained params and the metrics as litgpt's `fit` logs them: `train_loss[i]` the loss of
        micro-batch i, `learning_rate[i]` the scheduler's rate after optimizer step i (its
        `get_last_lr()` once `scheduler.step()` has run), and `val_loss` the mean loss over the
        validation micro-batches after training.
    """
    optimizer = make_optimizer(params, args)
    opt_state = optimizer.init(params)
    step = make_train_step(config, optimizer)
    schedule = get_lr_scheduler(args.learning_rate, args.warmup_steps, args.max_steps)
    losses, rates = [], []
    stream = batches(data["train_input_ids"], data["train_labels"], args.micro_batch_size)
    for i, (input_ids, labels) in zip(range(args.max_steps), stream, strict=False):
        params, opt_state, loss = step(params, opt_state, input_ids, labels)
        losses.append(float(loss))
        rates.append(float(schedule(i + 1)))  # as litgpt logs it: the scheduler's rate after step i
    val = validate(params, config, data["val_input_ids"], data["val_labels"], args.micro_batch_size)
    return params, {"train_loss": losses, "learning_rate": rates, "val_loss": val}
