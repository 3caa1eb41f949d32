"""Sandboxes: where every command a role, probe or grader runs is executed.

The protocol is `ground/sandbox.py`; implementations (`bwrap`, `docker`,
`none`) share a small base (`base.py`) and are chosen by name through `make_sandbox`
in `registry.py`. The Docker engine itself (client, base image) is `docker_engine.py`.
"""
