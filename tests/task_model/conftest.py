"""Fixtures of the task model's tests."""

from tests.fakes.wheels import local_index  # noqa: F401  (a local package index and a fresh twin cache)
