"""Differential probes for services, command-line programs and libraries.

The original is the executable specification: the same input goes to the
original (reference side) and the candidate (candidate side, forbidden packages
absent, no network), and the observations are compared under a declared,
recorded `Comparison`. Kinds: `http` (both services on loopback ports inside their
sandboxes), `process` (argv, stdin, files, environment) and `python_api` (calls on
the original and candidate packages). `search` drives property-based inputs
against both sides, shrinks a difference to a minimal reproducer and re-runs it;
`regression` turns a reproducer into a stored, re-runnable probe. `probe_file` reads
the `SERVICES` literal of a probe file (matched cases and request spaces) into probes;
`families` says which families apply to a task and how each side of one is started.
"""
