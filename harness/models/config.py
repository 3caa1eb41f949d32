"""A run's model: its settings (`ModelConfig`) and what its name selects (`ModelKind`), parsed once.

A model name is litellm's (`anthropic/…`, `openai/…`, `ollama/…`) or one of twin's own:
`replay:PATH`, `scripted:PATH`, `inbox:DIR`, `human`. `parse_model_name` is the one
place that reads a name; a `ModelConfig` parses its name when it is made and carries
the result, so whoever builds, labels or resumes the model asks `config.kind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, field_validator

MODEL_ENV = "TWIN_MODEL"
"""Environment variable naming the model when none is given."""
API_BASE_ENV = "TWIN_API_BASE"
"""Environment variable with a base URL override."""
API_KEY_ENV = "TWIN_API_KEY"
"""Environment variable with a key that overrides the provider's own variable."""

KindKey = Literal["replay", "scripted", "inbox", "human", "litellm"]
"""The kinds of model; `harness.models.factory.MODEL_KINDS` has a builder for each."""
KIND_KEYS: tuple[str, ...] = get_args(KindKey)


@dataclass(frozen=True)
class ModelKind:
    """What a model name selects.

    Attributes:
        key: the kind ('litellm' for any provider string).
        argument: what follows the kind's prefix (`PATH` of `replay:PATH`); for litellm, the whole name.
    """

    key: KindKey
    argument: str

    @property
    def live(self) -> bool:
        """False for a replay or a script: answers nobody reasoned out now."""
        return self.key not in ("replay", "scripted")

    @property
    def resumes_at_a_call(self) -> bool:
        """A resumed run tells it how many calls were kept (where a replay continues, what an inbox counts from)."""
        return self.key in ("replay", "inbox")

    @property
    def is_person(self) -> bool:
        """A person answers at the terminal."""
        return self.key == "human"


def parse_model_name(name: str) -> ModelKind:
    """The kind a model name selects, and its argument.

    Raises:
        ValueError: an empty name.
    """
    name = (name or "").strip()
    if not name:
        raise ValueError(f"no model given: pass --model or set {MODEL_ENV} (see docs/models.md)")
    if name == "human" or name.startswith("human:"):
        return ModelKind("human", name[len("human") :].lstrip(":"))
    prefix, colon, rest = name.partition(":")
    if colon and prefix in KIND_KEYS and prefix not in ("litellm", "human"):
        return ModelKind(prefix, rest)  # type: ignore[arg-type]  # checked against KIND_KEYS
    return ModelKind("litellm", name)


class ModelConfig(BaseModel):
    """Everything that defines a run's model; nested whole in `RunConfig.model` and handed whole to `make_model`.

    The API key is no part of it: it is never written anywhere.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="litellm model string, or replay:PATH, scripted:PATH, inbox:DIR, human.")
    api_base: str | None = Field(default=None, description="Base URL of an OpenAI-compatible server.")
    temperature: float | None = Field(default=None, description="Sampling temperature (provider default if None).")
    max_tokens: int | None = Field(default=None, ge=1, description="Reply token limit (provider default if None).")
    timeout_s: float = Field(default=600.0, gt=0, description="Seconds per attempt of one model call.")
    retries: int = Field(default=5, ge=0, description="Retries on rate limits, 5xx, time-outs.")
    backoff_s: float = Field(default=2.0, ge=0, description="First retry delay (doubles).")
    wait_s: float = Field(
        default=3600.0, gt=0, description="inbox: seconds to wait for each reply before the run stops (resumable)."
    )
    cache_dir: Path | None = Field(default=None, description="On-disk response cache of a live model.")

    _kind: ModelKind = PrivateAttr()

    @field_validator("name")
    @classmethod
    def _stripped(cls, name: str) -> str:
        if not name.strip():
            raise ValueError(f"no model given: pass --model or set {MODEL_ENV} (see docs/models.md)")
        return name.strip()

    def model_post_init(self, context: object) -> None:
        self._kind = parse_model_name(self.name)

    @property
    def kind(self) -> ModelKind:
        """What the name selects, parsed when this config was made."""
        return self._kind

    def with_wait(self, wait_s: float) -> ModelConfig:
        """A copy that waits `wait_s` for each inbox reply; the name is not parsed again.

        Raises:
            pydantic.ValidationError: `wait_s` is not a positive number.
        """
        field = type(self).model_fields["wait_s"]
        checked = TypeAdapter(Annotated[float, *field.metadata]).validate_python(wait_s)
        return self.model_copy(update={"wait_s": checked})


FLAT_MODEL_FIELDS = {
    "api_base": "api_base",
    "temperature": "temperature",
    "cache_dir": "cache_dir",
    "model_retries": "retries",
    "model_backoff_s": "backoff_s",
    "model_wait_s": "wait_s",
}
"""Keys that `config.json` version 1 kept beside the run's own, and their names in `ModelConfig`."""


def nest_model_settings(data: dict) -> dict:
    """`data` (a run's settings) with the model's settings in one `model` table.

    Reads the flat layout of `config.json` version 1 (`model` a string, `model_retries`, …
    beside the run's settings), which `[run]` tables and keywords may use too.
    """
    data = dict(data)
    flat = {new: data.pop(old) for old, new in FLAT_MODEL_FIELDS.items() if old in data}
    model = data.get("model")
    if isinstance(model, str):
        model = {"name": model}
    elif isinstance(model, ModelConfig) and flat:
        model = model.model_dump()
    if flat:
        model = {**(model or {}), **flat}
    if model is not None:
        data["model"] = model
    return data
