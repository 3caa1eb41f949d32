"""Declaring an original from the index: its licence is an SPDX expression or NOASSERTION, never free text."""

from __future__ import annotations

from task_model.distribution_install import declare_from_index
from tests.benchmark_adapter.test_distribution import FILES
from tests.fakes.wheels import build_wheel


def test_a_licence_stated_as_free_text_is_declared_as_noassertion(local_index):
    build_wheel(local_index, FILES, licence="Copyright (c) 2024 Someone <a@b.example>\x1b[2J")
    original = declare_from_index("pypi:fakeorig==1.0", ["fakeorig/model.py"])
    assert original.license == "NOASSERTION"
    build_wheel(local_index, FILES, version="1.1", licence="MIT OR Apache-2.0")
    assert declare_from_index("pypi:fakeorig==1.1", ["fakeorig/model.py"]).license == "MIT OR Apache-2.0"
