"""Whether a task's interface names a component of the original.

A task's interface is what its instruction asks the port to keep (the functions and classes
it names in code spans, `litgpt.finetune.lora.fit` or `fit(params, config, data, args)`) and
what `[metadata.twin.interface]` declares (`component` of its entries). A property whose
probe names such a component but whose reference never ran it is not yet established: the
port is held to the original there, and nothing compared it with the original.
"""

from __future__ import annotations

import re

from task_model.model import Task

CODE_SPAN = re.compile(r"`([^`]+)`")
"""A Markdown code span (inline code) of an instruction."""
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
"""A name or a dotted name inside a code span."""


def instruction_names(instruction: str) -> set[str]:
    """Every name and dotted name in the instruction's code spans, with each dotted name's last part."""
    found: set[str] = set()
    for span in CODE_SPAN.findall(instruction):
        for name in DOTTED.findall(span):
            found.add(name)
            found.add(name.rsplit(".", 1)[-1])
    return found


def declared_components(task: Task) -> set[str]:
    """The original's components that `[metadata.twin.interface]` entries say they migrate."""
    interface = task.settings.interface
    entries = [*interface.jit, *(c for c in (interface.loss, interface.converter) if c is not None)]
    return {entry.component for entry in entries if entry.component}


def on_interface(task: Task, component: str) -> bool:
    """Whether the task's interface names `component` (a dotted name of the original): a declared entry
    names it, or the instruction's code spans name it whole or by its last part (`fit` for
    `litgpt.finetune.lora.fit`)."""
    if component in declared_components(task):
        return True
    names = instruction_names(task.instruction)
    return component in names or component.rsplit(".", 1)[-1] in names
