"""Sandboxes: where every command a role, probe or grader runs is executed.

The protocol is `harness/ground/sandbox.py`; implementations (`bwrap`, `docker`,
`none`) are chosen by name through `make_sandbox` in `registry.py`.
"""
