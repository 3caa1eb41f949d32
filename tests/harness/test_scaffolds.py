"""Scaffolds by name: a registry of factories, each building a `Scaffold` over a session."""

from __future__ import annotations

from typing import get_args

import pytest

from ground.errors import TwinError
from harness.run.directory import Scaffold as ScaffoldName
from harness.scaffolds.base import BaseScaffold
from harness.scaffolds.mini_swe import MiniSweAgentScaffold
from harness.scaffolds.registry import SCAFFOLDS, check_scaffold
from harness.scaffolds.twin.loop import TwinLoop


def test_registry_names_the_configs_scaffolds_and_their_factories():
    assert set(SCAFFOLDS) == set(get_args(ScaffoldName))
    assert SCAFFOLDS == {"twin": TwinLoop, "base": BaseScaffold, "mini-swe-agent": MiniSweAgentScaffold}
    assert all(callable(getattr(factory, "run", None)) for factory in SCAFFOLDS.values())


def test_unknown_scaffold_lists_the_known_ones():
    with pytest.raises(TwinError, match="unknown scaffold 'swe': choose twin, base, mini-swe-agent"):
        check_scaffold("swe")
