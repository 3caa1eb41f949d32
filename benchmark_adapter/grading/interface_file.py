"""`twin task new --interface`: the public interface a port must keep, as names or as a file of signatures.

A name on the command line (`--interface "pkg.model:apply(params, x) -> logits"`) is one
entry. A file gives the whole interface, one signature a line with a one-line description
after ` # `, nested by indentation (two spaces, or a tab, a level) as modules hold classes
and functions and classes hold methods:

```
# lines starting with '#' are comments
timm.models.vision_transformer  # the ViT family
  class VisionTransformer(img_size=224, patch_size=16, embed_dim=768, depth=12)  # a ViT classifier
    forward(x) -> logits [batch, classes]  # the whole forward pass
    forward_features(x) -> tokens [batch, tokens, dim]  # the features before the head
  vit_base_patch16_224(**kwargs) -> VisionTransformer  # the model of this config
  default_cfgs: dict[str, dict]  # the pretrained configurations, by name
```

Each entry becomes a line of the instruction (a nested list), and a function directly
under a module becomes `module:function` in `task.toml`'s commented interface entries.
The file is task text: it goes into the instruction as data, every signature in a code span.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from task_model.model import TaskError

MAX_FILE_BYTES = 256 * 1024
MAX_LINE_CHARS = 400
"""A description is one line; a longer line is refused rather than cut."""

FILE_SUFFIXES = (".txt", ".md", ".pyi", ".toml")
"""A `--interface` value ending so that names no file is a missing file, not a name."""
Kind = Literal["module", "class", "method", "function", "name"]
_MODULE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*")


class InterfaceEntry(BaseModel):
    """One signature the port must keep."""

    signature: str = Field(description="The signature as written (a module's dotted name, a class, a function).")
    description: str = Field(default="", description="What it is or does, in one line ('' for a bare name).")
    kind: Kind = Field(description="module, class, method (in a class), function (in a module) or name.")
    depth: int = Field(default=0, description="Nesting level: 0 at the top, 1 in a module or class, 2 in both.")
    module: str | None = Field(default=None, description="The module it is in, where a module line holds it.")

    @property
    def function(self) -> str | None:
        """`module:function` of a function directly under a module (what an interface check names)."""
        name = self.signature.split("(", 1)[0].strip()
        if self.kind == "function" and self.module and name.isidentifier():
            return f"{self.module}:{name}"
        if self.kind == "name" and _is_function(self.signature):
            return self.signature.split("(", 1)[0].strip()
        return None

    def markdown(self) -> str:
        """Its instruction line: a list item, indented by its depth, the signature in a code span."""
        code = f"`` {self.signature} ``" if "`" in self.signature else f"`{self.signature}`"
        described = f"{code}: {self.description}" if self.description else code
        return f"{'  ' * (self.depth + 1)}- {described}"


def _is_function(name: str) -> bool:
    module, _, function = name.split("(", 1)[0].strip().partition(":")
    return bool(module) and all(p.isidentifier() for p in module.split(".")) and function.isidentifier()


def named_entries(names: list[str]) -> list[InterfaceEntry]:
    """Command-line names, one entry each."""
    return [InterfaceEntry(signature=n.strip(), kind="name") for n in names if n.strip()]


def read_interface_file(path: Path) -> list[InterfaceEntry]:
    """The entries of an interface file (module docstring).

    Raises:
        TaskError: one line naming the file and line: unreadable, too large, not text, empty, a line
            too long, an indentation that skips a level, or a method outside a class.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TaskError(f"cannot read the interface file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise TaskError(f"the interface file {path} is over {MAX_FILE_BYTES // 1024} KiB")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise TaskError(f"the interface file {path} is not UTF-8 text") from None
    entries: list[InterfaceEntry] = []
    parents: list[InterfaceEntry] = []  # the open module/class at each level
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if len(raw) > MAX_LINE_CHARS:
            raise TaskError(f"{where}: a line over {MAX_LINE_CHARS} characters (one signature and one line each)")
        if any(ord(c) < 32 and c != "\t" for c in raw):
            raise TaskError(f"{where}: a control character in the line")
        indent = raw[: len(raw) - len(raw.lstrip())]
        depth = indent.count("\t") + indent.count(" ") // 2
        if depth > len(parents):
            raise TaskError(f"{where}: indented deeper than the line it belongs under")
        del parents[depth:]
        signature, _, description = raw.strip().partition(" # ")
        signature, description = signature.strip(), description.strip()
        parent = parents[-1] if parents else None
        entry = _entry(signature, description, depth, parent)
        entries.append(entry)
        if entry.kind in ("module", "class"):
            parents.append(entry)
    if not entries:
        raise TaskError(f"the interface file {path} has no entry (one signature a line; format: docs/tasks.md)")
    return entries


def _entry(signature: str, description: str, depth: int, parent: InterfaceEntry | None) -> InterfaceEntry:
    """An entry's kind from where it stands: a class line, a line in a class (a method), a bare dotted
    name at the top (a module), a line in a module (a function or constant), else a name."""
    module = None
    if parent is not None:
        module = parent.signature if parent.kind == "module" else parent.module
    if signature.startswith("class "):
        kind: Kind = "class"
    elif parent is not None and parent.kind == "class":
        kind = "method"
    elif parent is None and _MODULE.fullmatch(signature):
        kind = "module"
    elif parent is not None:
        kind = "function"
    else:
        kind = "name"
    return InterfaceEntry(signature=signature, description=description, kind=kind, depth=depth, module=module)


def interface_entries(values: list[str]) -> list[InterfaceEntry]:
    """`--interface` values as entries: a value naming a file is read as an interface file, any other is a name.

    Raises:
        TaskError: as `read_interface_file`.
    """
    entries: list[InterfaceEntry] = []
    for value in values:
        if not value.strip():
            continue
        path = Path(value).expanduser()
        if not path.is_file() and path.suffix in FILE_SUFFIXES:
            raise TaskError(f"interface file not found: {value}")
        entries += read_interface_file(path) if path.is_file() else named_entries([value])
    return entries


def twin_metadata(probe_names: list[str], interface: list[str]) -> str:
    """task.toml's `[metadata.twin]`: the probe files `twin probe` runs, and the interface to fill in.

    The probe files listed are the grader's own copies in `tests/probes/` (one copy, hidden from
    the agent with the rest of `tests/`). An interface check needs its arguments, which a name
    does not give: each `module:function` name becomes a commented entry to complete
    (tasks/README.md), the others are in the instruction only.
    """
    files = ", ".join(json.dumps(f"tests/probes/{name}") for name in probe_names)
    text = f"\n[metadata.twin]\n# run by `twin probe` unless --no-task-probes\nprobe_files = [{files}]\n"
    functions = [n for n in interface if _is_function(n)]
    if functions:
        text += (
            "\n# Interface checks need each function's arguments (tasks/README.md); complete and uncomment:\n"
            + "".join(f'# [[metadata.twin.interface.jit]]\n# function = "{n}"\n# args = []\n' for n in functions)
        )
    return text


def interface_note(interface: list[str]) -> str | None:
    """Why `--interface` names alone start no interface check, and what to do (None: no names)."""
    if not interface:
        return None
    if any(_is_function(n) for n in interface):
        return (
            "interface checks need arguments: complete the commented [metadata.twin.interface] entries "
            "in task.toml (tasks/README.md)"
        )
    return (
        "the --interface names are in the instruction only; name functions as module:function to get "
        "[metadata.twin.interface] entries to complete in task.toml"
    )
