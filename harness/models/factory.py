"""`make_model(name)`: the model a run uses, chosen by name, recording and budgeted.

The registry `MODEL_KINDS` maps a kind to its builder; each builder imports its
module only when it is used:

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

from harness.ground.errors import TwinError
from harness.ground.model import (
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
from harness.ground.trajectory import ModelCallRecord, ModelErrorRecord, ModelRequest, Trajectory
from harness.models.budget import BudgetTracker

MODEL_ENV = "TWIN_MODEL"
"""Environment variable naming the model when none is given."""
API_BASE_ENV = "TWIN_API_BASE"
"""Environment variable with a base URL override."""
API_KEY_ENV = "TWIN_API_KEY"
"""Environment variable with a key that overrides the provider's own variable."""


class MeteredModel:
    """Wraps a model: budget check before each call; trajectory record and charge after.

    Args:
        inner: the model that answers.
        trajectory: where each call (and each failed call) is recorded; None records nothing.
        budget: the run's shared budget; None means unlimited.
    """

    def __init__(
        self,
        inner: Model,
        *,
        trajectory: Trajectory | None = None,
        budget: BudgetTracker | None = None,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.label: str = getattr(inner, "label", inner.name)
        self.trajectory = trajectory
        self.budget = budget

    def query(
        self, messages: list[Message], tools: list[ToolSchema] | None = None, *, role: str = "agent"
    ) -> ModelReply:
        """Ask the inner model; see `harness.ground.model.Model.query`."""
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
        tokenizer = self.name if model_kind(self.name) == "litellm" else None
        return estimate_usage(messages, tools, text, model=tokenizer)

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


@dataclass
class ModelOptions:
    """Everything a model builder may need besides the name's argument."""

    trajectory: Trajectory | None = None
    budget: BudgetTracker | None = None
    api_base: str | None = None
    api_key: str | None = None
    cache_dir: Path | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 600
    max_retries: int = 5
    backoff_s: float = 2.0
    start: int = 0
    wait_s: float = 3600.0


def _replay(argument: str, o: ModelOptions) -> Model:
    from harness.models.replay import ReplayModel

    return ReplayModel(Path(_path_of(argument, "replay:")), start=o.start)


def _scripted(argument: str, o: ModelOptions) -> Model:
    from harness.models.scripted import ScriptedModel

    return ScriptedModel.from_file(Path(_path_of(argument, "scripted:")))


def _inbox(argument: str, o: ModelOptions) -> Model:
    from harness.models.inbox import InboxModel

    return InboxModel(
        Path(_path_of(argument, "inbox:")), wait_s=o.wait_s, start=o.start, trajectory=o.trajectory, budget=o.budget
    )


def _human(argument: str, o: ModelOptions) -> Model:
    from harness.models.human import HumanModel

    if argument:
        raise TwinError("the human model takes no argument: use --model human")
    evidence = o.trajectory.path.parent / "evidence.sqlite" if o.trajectory is not None else None
    return HumanModel(trajectory=o.trajectory, evidence_path=evidence)


def _litellm(name: str, o: ModelOptions) -> Model:
    if o.max_retries < 0 or o.timeout_s <= 0:
        raise TwinError("max_retries must be >= 0 and timeout_s > 0")
    from harness.models.cache import ResponseCache
    from harness.models.litellm_client import LiteLLMModel

    return LiteLLMModel(
        name,
        api_base=o.api_base or os.environ.get(API_BASE_ENV) or None,
        api_key=o.api_key or os.environ.get(API_KEY_ENV) or None,
        temperature=o.temperature,
        max_tokens=o.max_tokens,
        timeout_s=o.timeout_s,
        max_retries=o.max_retries,
        backoff_s=o.backoff_s,
        cache=ResponseCache(o.cache_dir) if o.cache_dir is not None else None,
    )


MODEL_KINDS: dict[str, Callable[[str, ModelOptions], Model]] = {
    "replay": _replay,
    "scripted": _scripted,
    "inbox": _inbox,
    "human": _human,
    "litellm": _litellm,
}
"""Model kinds by name; `model_kind()` says which one a model string selects."""

NOT_LIVE = {"replay": "replayed", "scripted": "scripted"}
"""Kinds whose answers nobody reasoned out now, and how outputs label them."""


def model_kind(name: str) -> str:
    """The `MODEL_KINDS` key a model string selects ('litellm' for any provider string)."""
    name = (name or "").strip()
    if name == "human":
        return "human"
    prefix = name.split(":", 1)[0]
    return prefix if ":" in name and prefix in MODEL_KINDS and prefix != "litellm" else "litellm"


def make_model(
    name: str,
    *,
    trajectory: Trajectory | None = None,
    budget: BudgetTracker | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    cache_dir: Path | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    timeout_s: float = 600,
    max_retries: int = 5,
    backoff_s: float = 2.0,
    replay_start: int = 0,
    wait_s: float = 3600.0,
) -> MeteredModel:
    """The model named `name`, recording into `trajectory` and charging `budget`.

    Args:
        name: 'replay:PATH', 'scripted:PATH', 'inbox:DIR', 'human', or a litellm model string.
        trajectory: the run's trajectory.
        budget: the run's budget tracker.
        api_base: base URL override (else `TWIN_API_BASE`, else the provider's default).
        api_key: key override (else `TWIN_API_KEY`, else the provider's own env var).
        cache_dir: on-disk response cache for live models; None disables it.
        temperature, max_tokens: sampling settings; provider defaults when None.
        timeout_s: seconds per attempt.
        max_retries: retries on rate limits, 5xx, timeouts and connection failures.
        backoff_s: first retry delay (doubles each retry).
        replay_start: the run's model calls so far (a resumed run): where `replay:`
            continues, and the call position an `inbox:` request reports.
        wait_s: for `inbox:`, how long to wait for each reply.

    Raises:
        TwinError: empty name, or a replay/script file or inbox folder that cannot be used.
    """
    name = (name or "").strip()
    if not name:
        raise TwinError(f"no model given: pass --model or set {MODEL_ENV} (see docs/models.md)")
    options = ModelOptions(
        trajectory=trajectory,
        budget=budget,
        api_base=api_base,
        api_key=api_key,
        cache_dir=cache_dir,
        temperature=temperature,
        max_tokens=max_tokens,
        timeout_s=timeout_s,
        max_retries=max_retries,
        backoff_s=backoff_s,
        start=replay_start,
        wait_s=wait_s,
    )
    kind = model_kind(name)
    argument = name if kind == "litellm" else name[len(kind) :]
    inner = MODEL_KINDS[kind](argument, options)
    return MeteredModel(inner, trajectory=trajectory, budget=budget)


def check_model(name: str, *, wait_s: float = 3600.0) -> None:
    """Refuse a model string that cannot work before a run directory is made for it.

    Builds the model without recording anything (a missing recording or script, an
    unusable inbox folder, a bad name fail here), and `human` needs a terminal.

    Raises:
        TwinError: with the reason.
    """
    make_model(name, wait_s=wait_s)
    if model_kind(name) == "human" and not sys.stdin.isatty():
        raise TwinError("--model human needs a terminal on standard input (use inbox:DIR for programs)")


def _path_of(argument: str, prefix: str) -> str:
    path = argument.lstrip(":").strip()
    if not path:
        example = {"replay:": "runs/<run-id>/trajectory.jsonl", "scripted:": "replies.yaml", "inbox:": "inbox/"}
        raise TwinError(f"{prefix} needs a path, e.g. {prefix}{example[prefix]}")
    return path
