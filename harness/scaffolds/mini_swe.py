"""`--scaffold mini-swe-agent`: mini-swe-agent's own agent, on twin's model client and sandbox.

The agent is the package's `DefaultAgent` with the system and instance templates
of its default configuration (`mini.yaml`, the one its `mini` command uses),
unchanged; the task's instruction, then what the run has left of its budget, is its
`{{task}}`. Two adapters, written against
its `Model` and `Environment` protocols, are all that is twin's:

- `TwinModelAdapter` sends its messages and its single `bash` tool through twin's
  model client, so budgets, the trajectory, replay, `human` and `inbox:` apply, and
  parses and formats tool calls with the package's own functions and templates;
- `SandboxEnvironment` runs each command in twin's candidate-side sandbox (the
  boundary: `/source` and `/assets` read-only, `/app` writable, nothing else,
  torch absent, no network) and keeps the package's submit convention
  (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`).

Changed settings, and why: `step_limit` is the base scaffold's steps per round
and `cost_limit` 0, because twin's budget governs the run; the command time limit
is twin's; commands run in `/app`. Its `{{system}} {{release}} {{version}}
{{machine}}` are 'Linux', '', '' and the machine type: the sandbox is Linux, and
the host's kernel strings would make a recording unreplayable on another machine.
Like the base scaffold it runs up to R rounds, each a fresh agent on the same /app, a new one only
with something new to tell it (the base scaffold's rule: it did not submit, or twin's candidate-side
checks found something violated after it did).
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import platform
import shutil
import tempfile
import time
from types import SimpleNamespace
from typing import Any

from ground.errors import TwinError
from ground.model import Model
from harness.run.progress import Progress
from harness.run.session import Session
from harness.scaffolds.base import BaseScaffold, Reprompt
from roles import prompting
from roles.tools import (
    MAX_COMMAND_BYTES,
    MAX_TOOL_CALLS_PER_REPLY,
    ToolError,
    ToolResult,
    check_text_argument,
    command_limit,
    limit_sentence,
    timeout_text,
)

ROLE = "agent"


def _import_mini() -> Any:
    """Import mini-swe-agent quietly, without reading the user's own mini-swe-agent settings.

    At import time the package loads `.env` (keys, model name, cost and call limits)
    from `MSWEA_GLOBAL_CONFIG_DIR` (else the user's config folder) into the process
    environment, where twin's model client would see it too. twin's model client,
    keys and budget are the ones that apply, so the package is imported with that
    variable pointing at a fresh, private, empty folder; the variable is put back as
    it was afterwards, since the package reads it only at import. A package that
    something else in the process imported first is used as it is.
    """
    settings = {"MSWEA_SILENT_STARTUP": "1", "MSWEA_GLOBAL_CONFIG_DIR": _empty_config_dir()}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import builtin_config_dir
        from minisweagent.environments.local import LocalEnvironment
        from minisweagent.exceptions import FormatError
        from minisweagent.models.utils.actions_toolcall import (
            BASH_TOOL,
            format_toolcall_observation_messages,
            parse_toolcall_actions,
        )
        from minisweagent.models.utils.openai_multimodal import expand_multimodal_content
    except ImportError:
        raise TwinError(
            "--scaffold mini-swe-agent needs the mini-swe-agent package: pip install 'twin-harness[mini]'"
        ) from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return SimpleNamespace(
        DefaultAgent=DefaultAgent,
        builtin_config_dir=builtin_config_dir,
        LocalEnvironment=LocalEnvironment,
        FormatError=FormatError,
        BASH_TOOL=BASH_TOOL,
        format_toolcall_observation_messages=format_toolcall_observation_messages,
        parse_toolcall_actions=parse_toolcall_actions,
        expand_multimodal_content=expand_multimodal_content,
    )


@functools.cache
def _empty_config_dir() -> str:
    """A folder of this process's own (mode 0700, removed at exit), so nobody else can put a `.env` in it."""
    path = tempfile.mkdtemp(prefix="twin-mini-swe-agent-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def default_config() -> dict[str, Any]:
    """The package's default configuration (`mini.yaml`), as it ships."""
    import yaml

    mini = _import_mini()
    return yaml.safe_load((mini.builtin_config_dir / "mini.yaml").read_text())


class TwinModelAdapter:
    """mini-swe-agent's `Model` protocol over a twin model.

    Args:
        model: twin's (metered, recorded) model.
        config: the `model` section of mini-swe-agent's configuration (its templates).
        on_reply: called with (step, reply) after each call (progress, trajectory labels).
    """

    def __init__(self, model: Model, config: dict[str, Any], on_reply: Any = None, limit: str = "") -> None:
        self.mini = _import_mini()
        self.model = model
        # the package's bash tool, its description followed by the command's time limit (`limit`)
        self.tool = copy.deepcopy(self.mini.BASH_TOOL)
        if limit:
            self.tool["function"]["description"] = self.tool["function"]["description"].rstrip(".") + "." + limit
        self.config = SimpleNamespace(
            observation_template=config["observation_template"],
            format_error_template=config["format_error_template"],
            multimodal_regex=config.get("multimodal_regex", ""),
        )
        self.on_reply = on_reply
        self.calls = 0

    def query(self, messages: list[dict], **kwargs: Any) -> dict:
        prepared = [{k: v for k, v in m.items() if k != "extra"} for m in messages]
        reply = self.model.query(prepared, [self.tool], role=ROLE)
        self.calls += 1
        if self.on_reply is not None:
            self.on_reply(self.calls, reply)
        calls = [
            SimpleNamespace(
                id=c.id,
                function=SimpleNamespace(
                    name=c.name, arguments=c.arguments_raw if c.arguments_raw is not None else json.dumps(c.arguments)
                ),
            )
            for c in reply.tool_calls
        ]
        extra = {"cost": reply.cost_usd, "timestamp": time.time()}
        if len(calls) > MAX_TOOL_CALLS_PER_REPLY:  # none run: the package answers one format error
            error = self.mini.FormatError(
                {
                    "role": "user",
                    "content": f"Not run: one reply may carry at most {MAX_TOOL_CALLS_PER_REPLY} tool calls "
                    f"(this one carried {len(calls)}).",
                    "extra": {"interrupt_type": "FormatError", **extra},
                }
            )
            raise error
        try:
            actions = self.mini.parse_toolcall_actions(
                calls,
                format_error_template=self.config.format_error_template,
                # what a provider reports: 'tool_calls' when the reply calls tools, else 'stop'
                template_kwargs={"finish_reason": "tool_calls" if calls else "stop"},
            )
        except self.mini.FormatError as exc:
            exc.messages[0]["extra"].update(extra)
            raise
        message = reply.as_message()
        message["extra"] = {"actions": actions, **extra}
        return message

    def format_message(self, **kwargs: Any) -> dict:
        return self.mini.expand_multimodal_content(kwargs, pattern=self.config.multimodal_regex)

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        return self.mini.format_toolcall_observation_messages(
            actions=message.get("extra", {}).get("actions", []),
            outputs=outputs,
            observation_template=self.config.observation_template,
            template_vars=template_vars,
            multimodal_regex=self.config.multimodal_regex,
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"model_name": self.model.name, **vars(self.config), **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"model": {"model_name": self.model.name}, "model_type": "twin"}}}


def sandbox_environment(
    sandbox: Any,
    *,
    env: dict[str, str],
    timeout_s: float,
    on_command: Any,
    budget_check: Any = None,
    time_left: Any = None,
) -> Any:
    """A mini-swe-agent `Environment` whose commands run in twin's sandbox, the run's budget checked
    before each (`budget_check` raises `BudgetExceeded`, which the package's agent passes on), each
    limited to the smaller of its own limit and what is left of the run's wall budget (`time_left`)."""
    mini = _import_mini()

    class SandboxEnvironment(mini.LocalEnvironment):
        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
            if budget_check is not None:
                budget_check()
            command = action.get("command", "")
            refused = _refuse_command(command)
            if refused:  # a command no process can be given is the agent's error, shown to it
                output = {"output": f"error: {refused}", "returncode": 2, "exception_info": refused}
                on_command(command if isinstance(command, str) else repr(command)[:200], output)
                return output
            limit, note = command_limit(timeout or timeout_s, time_left)
            result = sandbox.exec(command, cwd=cwd or self.config.cwd, env=self.config.env, timeout_s=limit)
            output = {
                "output": result.stdout + result.stderr,
                "returncode": result.returncode,
                "exception_info": "the command timed out" + timeout_text(result, note) if result.timed_out else "",
            }
            on_command(command, output)
            self._check_finished(output)  # the package's own submit convention
            return output

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            machine = {"system": "Linux", "release": "", "version": "", "machine": platform.machine()}
            return {**self.config.model_dump(), **machine, **kwargs}

    return SandboxEnvironment(cwd="/app", env=env, timeout=int(timeout_s))


def _refuse_command(command: Any) -> str:
    """Why a command cannot be run (not text, a NUL byte, text UTF-8 cannot hold, too long), or ""."""
    try:
        check_text_argument("command", command)
    except ToolError as exc:
        return str(exc)
    if "\0" in command:
        return "command contains a NUL byte"
    if len(command.encode("utf-8")) > MAX_COMMAND_BYTES:
        return f"command is longer than {MAX_COMMAND_BYTES} bytes"
    return ""


class MiniSweAgentScaffold(BaseScaffold):
    """R rounds of mini-swe-agent's `DefaultAgent`, committed and graded like the base scaffold."""

    name = "mini-swe-agent"

    def __init__(self, session: Session, progress: Progress) -> None:
        self.s = session
        self.progress = progress
        self.mini = _import_mini()
        self.config = default_config()
        bench = session.workbench(ROLE, write=True)
        self.sandbox = bench.candidate
        self.timeout_s = bench.command_timeout_s
        self.on_step = session.step_observer(progress)

    def work(self, t: int, reprompt: Reprompt) -> tuple[str, bool]:
        """One run of the package's agent on the task's instruction (from round 2, with what is new: the base
        scaffold's rule); returns its exit status and whether it submitted."""
        model = TwinModelAdapter(
            self.s.model,
            self.config["model"],
            lambda step, reply: self.on_step(ROLE, step, reply),
            limit=limit_sentence(self.timeout_s, self.s.budget.wall_left),
        )
        env = sandbox_environment(
            self.sandbox,
            env=self.config.get("environment", {}).get("env", {}),
            timeout_s=self.timeout_s,
            on_command=self._record,
            budget_check=self.s.budget.check_tool,
            time_left=self.s.budget.wall_left,
        )
        agent_config = {
            **self.config["agent"],
            "step_limit": self.s.config.base_steps,
            "cost_limit": 0,
            "output_path": self.s.run.root / f"mini-swe-agent.round-{t}.traj.json",
        }
        agent = self.mini.DefaultAgent(model, env, **agent_config)
        task = self.s.task.instruction
        if t > 1:
            task += "\n\n" + prompting.render(
                "single_agent_round",
                round=t,
                candidate_dir=self.s.task.settings.candidate_mount,
                step_limit=reprompt.step_limit,
                failing=reprompt.failing,
            )
        # the package's own templates, unchanged: what the run has left follows the instruction in its {{task}}
        result = agent.run(f"{task}\n\n# Budget\n{self.budget_left()}")
        status = result.get("exit_status", "?")
        return f"mini-swe-agent exit: {status}", status == "Submitted"

    def _record(self, command: str, output: dict) -> None:
        ok = output["returncode"] == 0 and not output["exception_info"]
        self.s.record_tool(ROLE, "bash", {"command": command}, ToolResult(text=output["output"], ok=ok))
