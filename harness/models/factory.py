"""`make_model(config)`: the model a run uses, chosen by its name's kind, recording and budgeted.

The registry `MODEL_KINDS` maps a kind (`ModelConfig.kind`, parsed once from the
name) to its builder; each builder imports its module only when it is used:

- `replay:PATH`   → `ReplayModel` (the assistant turns of a recorded trajectory);
- `scripted:PATH` → `ScriptedModel` (a JSON/YAML list of replies);
- `inbox:DIR`     → `InboxModel` (an outside program answers through files);
- `human`         → `HumanModel` (a person answers in the terminal);
- anything else   → `LiteLLMModel` (any litellm model string).

Whatever is chosen is wrapped in a `MeteredModel`, which checks the budget
before each call, then records the call into the trajectory and charges the
budget, so the loop never has to. A reply that reports no tokens (an outside
program, a person, a recording without usage) is counted with a tokenizer and
marked estimated: no call that sent text is counted as free.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ground.errors import TwinError
from ground.model import (
    Message,
    Model,
    ModelInfraError,
    ModelReply,
    ModelRequestError,
    ModelStopped,
    ReplayDivergence,
    ToolSchema,
    Usage,
)
from ground.trajectory import ModelCallRecord, ModelErrorRecord, ModelRequest, Trajectory
from harness.models.budget import BudgetTracker
from harness.models.config import API_BASE_ENV, API_KEY_ENV, KIND_KEYS, ModelConfig


class MeteredModel:
    """Wraps a model: budget check before each call; trajectory record and charge after.

    Args:
        inner: the model that answers.
        trajectory: where each call (and each failed call) is recorded; None records nothing.
        budget: the run's shared budget; None means unlimited.
        tokenizer: the litellm model whose tokenizer counts a reply that reported no tokens; None: a default one.
    """

    def __init__(
        self,
        inner: Model,
        *,
        trajectory: Trajectory | None = None,
        budget: BudgetTracker | None = None,
        tokenizer: str | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.label: str = getattr(inner, "label", inner.name)
        self.trajectory = trajectory
        self.budget = budget
        self.tokenizer = tokenizer

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """Ask the inner model; see `ground.model.Model.query`."""
        if self.budget is not None:
            self.budget.check()
        started = time.monotonic()
        try:
            reply = self.inner.query(messages, tools, role=role)
        except (ModelInfraError, ModelRequestError, ReplayDivergence, ModelStopped) as exc:
            self._record_error(role, exc, time.monotonic() - started)
            raise
        if not reply.usage.reported:
            reply = reply.model_copy(update={"usage": self._estimate(messages, tools, reply)})
        if self.trajectory is not None:
            context = self.trajectory.context
            self.trajectory.append(
                ModelCallRecord(
                    index=self.trajectory.next_model_call_index(),
                    role=role,
                    round=context.round,
                    step=context.step,
                    model=self.name,
                    label=self.label,
                    request=ModelRequest(messages=messages, tools=tools),
                    reply=reply,
                )
            )
        if self.budget is not None:
            self.budget.charge(reply.usage, reply.cost_usd)
        return reply

    def _estimate(self, messages: list[Message], tools: list[ToolSchema] | None, reply: ModelReply) -> Usage:
        """Tokens of a reply that reported none (an outside program, a person, an old recording), counted
        with the model's tokenizer where it is a litellm model and litellm knows it, else a default one."""
        from harness.models.litellm_client import estimate_usage

        answer = reply.as_message()
        text = (answer.get("content") or "") + (json.dumps(answer["tool_calls"]) if answer.get("tool_calls") else "")
        return estimate_usage(messages, tools, text, model=self.tokenizer)

    def _record_error(self, role: str, exc: Exception, latency_s: float) -> None:
        if self.trajectory is None:
            return
        kind = "infra" if isinstance(exc, ModelInfraError) else "request"
        if isinstance(exc, ReplayDivergence):
            kind = "replay"
        if isinstance(exc, ModelStopped):
            kind = "stopped"
        context = self.trajectory.context
        self.trajectory.append(
            ModelErrorRecord(
                role=role,
                round=context.round,
                step=context.step,
                model=self.name,
                kind=kind,
                error=str(exc),
                latency_s=latency_s,
            )
        )


@dataclass(frozen=True)
class ModelOptions:
    """What a model builder is given: the model's settings and the run's objects it records into."""

    config: ModelConfig
    trajectory: Trajectory | None = None
    budget: BudgetTracker | None = None
    api_key: str | None = None
    start: int = 0


def _replay(argument: str, o: ModelOptions) -> Model:
    from harness.models.replay import ReplayModel

    return ReplayModel(Path(_path_of(argument, "replay:")), start=o.start)


def _scripted(argument: str, o: ModelOptions) -> Model:
    from harness.models.scripted import ScriptedModel

    return ScriptedModel.from_file(Path(_path_of(argument, "scripted:")))


def _inbox(argument: str, o: ModelOptions) -> Model:
    from harness.models.inbox import InboxModel

    return InboxModel(
        Path(_path_of(argument, "inbox:")),
        wait_s=o.config.wait_s,
        start=o.start,
        trajectory=o.trajectory,
        budget=o.budget,
    )


def _human(argument: str, o: ModelOptions) -> Model:
    from harness.models.human import HumanModel

    if argument:
        raise TwinError("the human model takes no argument: use --model human")
    evidence = o.trajectory.path.parent / "evidence.sqlite" if o.trajectory is not None else None
    return HumanModel(trajectory=o.trajectory, evidence_path=evidence)


def _litellm(argument: str, o: ModelOptions) -> Model:  # argument: the whole name, as o.config.name
    from harness.models.cache import ResponseCache
    from harness.models.litellm_client import LiteLLMModel

    return LiteLLMModel(
        o.config,
        api_base=o.config.api_base or os.environ.get(API_BASE_ENV) or None,
        api_key=o.api_key or os.environ.get(API_KEY_ENV) or None,
        cache=ResponseCache(o.config.cache_dir) if o.config.cache_dir is not None else None,
    )


MODEL_KINDS: dict[str, Callable[[str, ModelOptions], Model]] = {
    "replay": _replay,
    "scripted": _scripted,
    "inbox": _inbox,
    "human": _human,
    "litellm": _litellm,
}
"""Model kinds by name; `ModelConfig.kind` says which one a model name selects."""

assert set(MODEL_KINDS) == set(KIND_KEYS), "MODEL_KINDS and harness.models.config.KindKey disagree"


def make_model(
    config: ModelConfig,
    *,
    trajectory: Trajectory | None = None,
    budget: BudgetTracker | None = None,
    api_key: str | None = None,
    start: int = 0,
) -> MeteredModel:
    """The model `config` names, recording into `trajectory` and charging `budget`.

    Args:
        config: the model's name (already parsed into its kind) and settings.
        trajectory: the run's trajectory.
        budget: the run's budget tracker.
        api_key: key override (else `TWIN_API_KEY`, else the provider's own env var); never written anywhere.
        start: the run's model calls so far (a resumed run): where `replay:` continues, and the call
            position an `inbox:` request reports.

    Raises:
        TwinError: a replay/script file or inbox folder that cannot be used, or a name its kind refuses.
    """
    kind = config.kind
    options = ModelOptions(config, trajectory=trajectory, budget=budget, api_key=api_key, start=start)
    inner = MODEL_KINDS[kind.key](kind.argument, options)
    tokenizer = config.name if kind.key == "litellm" else None
    return MeteredModel(inner, trajectory=trajectory, budget=budget, tokenizer=tokenizer)


def check_model(config: ModelConfig) -> None:
    """Refuse a model that cannot work before a run directory is made for it.

    Builds the model without recording anything (a missing recording or script, an
    unusable inbox folder, a bad name fail here), and `human` needs a terminal.

    Raises:
        TwinError: with the reason.
    """
    make_model(config)
    if config.kind.is_person and not sys.stdin.isatty():
        raise TwinError("--model human needs a terminal on standard input (use inbox:DIR for programs)")


def _path_of(argument: str, prefix: str) -> str:
    path = argument.lstrip(":").strip()
    if not path:
        example = {"replay:": "runs/<run-id>/trajectory.jsonl", "scripted:": "replies.yaml", "inbox:": "inbox/"}
        raise TwinError(f"{prefix} needs a path, e.g. {prefix}{example[prefix]}")
    return path
