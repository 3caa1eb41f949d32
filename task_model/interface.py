"""A task's declared interface: what generic candidate-side checks can be derived from.

Declared in `task.toml` under `[metadata.twin.interface]` (see `tasks/README.md`):

```toml
[metadata.twin.interface]
entrypoints = [["python", "train.py", "--steps", "1"]]

[[metadata.twin.interface.jit]]
function = "model:forward"
args = [{call = "model:init", args = [{key = 0}]}, {normal = [2, 4]}]

[metadata.twin.interface.loss]
function = "train:loss_fn"
args = [{call = "model:init", args = [{key = 0}]}, {normal = [8, 4]}, {normal = [8, 3]}]

[metadata.twin.interface.converter]
function = "convert:convert"
args = [{asset = "weights.npz"}]
params = {call = "model:init", args = [{key = 0}]}
```

Functions are `module:name`, with modules named as the candidate's import roots
import them. An argument is a literal (number, string, list) or one of:
`{normal = SHAPE}` / `{zeros = SHAPE}` / `{ints = SHAPE, high = N}` (float32 or
int32 arrays drawn from the probe's seed), `{key = SEED}` (a JAX PRNG key),
`{asset = "rel/path"}` (a path under the task's assets), `{call = "module:name",
args = [...]}` (what a candidate function returns).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

Argument = Any
"""An argument spec: a literal, or a one-key table as in the module docstring."""

SPEC_KEYS = {"normal", "zeros", "ints", "key", "asset", "call"}


def _check_function(value: str) -> str:
    module, _, name = value.partition(":")
    if not module or not name.isidentifier():
        raise ValueError(f"{value!r} is not 'module:function'")
    return value


def _check_args(args: list[Argument]) -> list[Argument]:
    for arg in args:
        if isinstance(arg, dict):
            spec = set(arg) & SPEC_KEYS
            if len(spec) != 1:
                raise ValueError(f"argument {arg!r} needs exactly one of {', '.join(sorted(SPEC_KEYS))}")
            if "call" in arg:
                _check_function(arg["call"])
                _check_args(arg.get("args", []))
    return args


class FunctionCall(BaseModel):
    """A candidate function and the arguments it is called with."""

    function: str = Field(description="'module:name', as the candidate's import roots import it.")
    args: list[Argument] = Field(default_factory=list, description="Argument specs (module docstring).")
    component: str | None = Field(default=None, description="The original's component it migrates (localization).")

    @field_validator("function")
    @classmethod
    def _function(cls, value: str) -> str:
        return _check_function(value)

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[Argument]) -> list[Argument]:
        return _check_args(value)


class ConverterCall(FunctionCall):
    """A checkpoint converter and the parameters its output must match in tree, shapes and dtypes."""

    params: Argument = Field(description="An argument spec giving the candidate's own parameters.")


class TaskInterface(BaseModel):
    """`[metadata.twin.interface]`: the functions generic checks are derived from."""

    jit: list[FunctionCall] = Field(default_factory=list, description="Functions that must trace under jax.jit.")
    loss: FunctionCall | None = Field(
        default=None, description="A loss whose gradients (w.r.t. its first argument) must be finite and live."
    )
    converter: ConverterCall | None = Field(
        default=None, description="A converter whose output must have the parameter tree of `params`."
    )
    entrypoints: list[list[str]] = Field(
        default_factory=list, description="Commands (argv, run in the candidate root) that must exit 0."
    )
    entrypoint_timeout_s: float = Field(default=300.0, description="Wall-time limit of one entry point.")
