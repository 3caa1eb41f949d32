"""Sandboxes: where every command a role, probe or grader runs is executed.

`base.py` declares the protocol; implementations (`bwrap`, `docker`, `none`) are
chosen by name through `make_sandbox` in `registry.py`.
"""
