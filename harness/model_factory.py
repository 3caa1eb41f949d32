"""`make_model(name)`: the model a run uses, chosen by name, recording and budgeted.

- `replay:PATH`   → `ReplayModel` (the assistant turns of a recorded trajectory);
- `scripted:PATH` → `ScriptedModel` (a JSON/YAML list of replies);
- anything else   → `LiteLLMModel` (any litellm model string).

Whatever is chosen is wrapped in a `MeteredModel`, which checks the budget
before each call, then records the call into the trajectory and charges the
budget, so the loop never has to.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.budget import BudgetTracker
from harness.errors import TwinError
from harness.model import (
    Message,
    Model,
    ModelInfraError,
    ModelReply,
    ModelRequestError,
    ReplayDivergence,
    ToolSchema,
)
from harness.trajectory import ModelCallRecord, ModelErrorRecord, ModelRequest, Trajectory

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
        """Ask the inner model; see `harness.model.Model.query`."""
        if self.budget is not None:
            self.budget.check()
        started = time.monotonic()
        try:
            reply = self.inner.query(messages, tools, role=role)
        except (ModelInfraError, ModelRequestError, ReplayDivergence) as exc:
            self._record_error(role, exc, time.monotonic() - started)
            raise
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

    def _record_error(self, role: str, exc: Exception, latency_s: float) -> None:
        if self.trajectory is None:
            return
        kind = "infra" if isinstance(exc, ModelInfraError) else "request"
        if isinstance(exc, ReplayDivergence):
            kind = "replay"
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
) -> MeteredModel:
    """The model named `name`, recording into `trajectory` and charging `budget`.

    Args:
        name: 'replay:PATH', 'scripted:PATH', or a litellm model string.
        trajectory: the run's trajectory.
        budget: the run's budget tracker.
        api_base: base URL override (else `TWIN_API_BASE`, else the provider's default).
        api_key: key override (else `TWIN_API_KEY`, else the provider's own env var).
        cache_dir: on-disk response cache for live models; None disables it.
        temperature, max_tokens: sampling settings; provider defaults when None.
        timeout_s: seconds per attempt.
        max_retries: retries on rate limits, 5xx, timeouts and connection failures.
        backoff_s: first retry delay (doubles each retry).
        replay_start: for `replay:`, the recorded call to continue from (resumed runs).

    Raises:
        TwinError: empty name, or a replay/script file that cannot be used.
    """
    name = (name or "").strip()
    if not name:
        raise TwinError(f"no model given: pass --model or set {MODEL_ENV} (see docs/models.md)")
    inner: Model
    if name.startswith("replay:"):
        from harness.replay import ReplayModel

        inner = ReplayModel(Path(_path_of(name, "replay:")), start=replay_start)
    elif name.startswith("scripted:"):
        from harness.scripted import ScriptedModel

        inner = ScriptedModel.from_file(Path(_path_of(name, "scripted:")))
    else:
        if max_retries < 0 or timeout_s <= 0:
            raise TwinError("max_retries must be >= 0 and timeout_s > 0")
        from harness.litellm_client import LiteLLMModel
        from harness.model_cache import ResponseCache

        inner = LiteLLMModel(
            name,
            api_base=api_base or os.environ.get(API_BASE_ENV) or None,
            api_key=api_key or os.environ.get(API_KEY_ENV) or None,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            cache=ResponseCache(cache_dir) if cache_dir is not None else None,
        )
    return MeteredModel(inner, trajectory=trajectory, budget=budget)


def _path_of(name: str, prefix: str) -> str:
    path = name[len(prefix) :].strip()
    if not path:
        raise TwinError(f"{prefix} needs a path, e.g. {prefix}runs/<run-id>/trajectory.jsonl")
    return path
