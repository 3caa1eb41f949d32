"""Loading and rendering the prompt templates of `prompts/`.

Templates are Jinja2 files (`<name>.md.j2`), rendered with `StrictUndefined` so a
missing variable is an error, not an empty string. The one variable with a default is
`candidate_dir`, where the candidate lies inside the sandboxes: `/app` unless the task
puts it elsewhere (a published task's `/app/jax_repo`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

import prompts

PROMPTS_DIR = Path(prompts.__file__).parent
CANDIDATE_DIR = "/app"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.globals["candidate_dir"] = CANDIDATE_DIR
    return env


def render(name: str, **variables: Any) -> str:
    """Render `prompts/<name>.md.j2`."""
    return _environment().get_template(f"{name}.md.j2").render(**variables).strip()


def template_names() -> list[str]:
    return sorted(p.name.removesuffix(".md.j2") for p in PROMPTS_DIR.glob("*.md.j2"))
