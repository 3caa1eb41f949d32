"""Loading and rendering the prompt templates of `prompts/`.

Templates are Jinja2 files (`<name>.md.j2`), rendered with `StrictUndefined` so a
missing variable is an error, not an empty string. The variables with a default are
`candidate_dir`, where the candidate lies inside the sandboxes: `/app` unless the task
puts it elsewhere (a published task's `/app/jax_repo`), `budget` and `cited_sources` (none).

Whether a variable's text is fenced is decided here, not in the templates: every
variable is agent text unless its name is in `HARNESS_VARIABLES`, or its value is a
number or already `HarnessText` (`roles.fence`; `FencedText` is one). Agent text is fenced
whole by `fence_agent_text`: a string as it is, a list one item per line (a tuple's
parts joined by " — "). So a new template variable, or a new value passed to an old
one, is fenced unless someone declared it the harness's.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

import prompts
from roles.fence import HarnessText, fence_agent_text
from roles.tools import MAX_TOOL_CALLS_PER_REPLY

PROMPTS_DIR = Path(prompts.__file__).parent
CANDIDATE_DIR = "/app"
HARNESS_VARIABLES = frozenset({"round", "instruction", "candidate_dir", "budget"})
"""Variables whose text twin or the task's author wrote: the round number, the task's
instruction, the candidate's mount point and the budget the role has left."""
AGENT_LABELS = {
    "changed_files": "files changed since the previous round (names chosen by the Migrator)",
    "objectives": "objectives of the previous diagnosis, each done or open",
    "unchecked": "what the previous Verifier reported it could not examine",
}


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.globals["candidate_dir"] = CANDIDATE_DIR
    env.globals["budget"] = ""  # every role and scaffold passes its own; a bare render shows none
    env.globals["cited_sources"] = ""  # the Migrator's: the spans its diagnosis cites
    env.globals["max_tool_calls"] = MAX_TOOL_CALLS_PER_REPLY
    return env


def render(name: str, **variables: Any) -> str:
    """Render `prompts/<name>.md.j2`, every agent-text variable fenced (see the module docstring)."""
    values = {key: as_prompt_value(key, value) for key, value in variables.items()}
    return _environment().get_template(f"{name}.md.j2").render(**values).strip()


def as_prompt_value(name: str, value: Any) -> Any:
    """What the template gets for variable `name`: harness values as they are, agent text fenced."""
    if isinstance(value, (HarnessText, bool, int, float)) or value is None:
        return value
    if name in HARNESS_VARIABLES:
        return HarnessText(value)
    label = AGENT_LABELS.get(name, name.replace("_", " "))
    if isinstance(value, (list, tuple)):
        lines = [" — ".join(map(str, item)) if isinstance(item, (list, tuple)) else str(item) for item in value]
        return fence_agent_text(label, "\n".join(f"- {line}" for line in lines))
    return fence_agent_text(label, str(value))


def template_names() -> list[str]:
    return sorted(p.name.removesuffix(".md.j2") for p in PROMPTS_DIR.glob("*.md.j2"))
