"""Which of the original's components a task's interface names."""

from __future__ import annotations

from pathlib import Path

from task_model.interface import FunctionCall
from task_model.interface_names import instruction_names, on_interface
from task_model.loader import load_task

FIXTURES = Path(__file__).parents[1] / "probes" / "fixtures"


def test_the_instruction_s_code_spans_name_components_whole_or_by_their_last_name():
    text = "Keep `litgpt.finetune.lora.fit(params, config)` and litgpt's `validate(params,\n  x)`; prose is no name."
    names = instruction_names(text)
    assert {"litgpt.finetune.lora.fit", "fit", "params", "validate", "x"} <= names  # a span may wrap a line
    assert "prose" not in names


def test_a_component_is_on_the_interface_when_the_instruction_or_the_declared_interface_names_it():
    task = load_task(FIXTURES / "plain")  # instruction: `calc.affine(params, x)` and `calc.net(params, x)`
    assert on_interface(task, "calc.affine") and on_interface(task, "pkg.calc.net")
    assert not on_interface(task, "calc.unused")
    declared = task.model_copy(deep=True)
    declared.settings.interface.jit = [FunctionCall(function="calc:unused_port", component="calc.unused")]
    assert on_interface(declared, "calc.unused")
