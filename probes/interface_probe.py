"""Candidate-side checks derived from a task's declared interface (a probe file template).

`probes.interface_checks` copies this file, appends the task's `SPEC` (its
`[metadata.twin.interface]`) and `PROBES`, and runs the `check_*` functions the
interface gives something to check with, on the candidate side only (torch absent).
A crash in the candidate's functions is the candidate's (violated); one here is the
probe's (not established). Standalone: imports nothing from twin.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

SPEC: dict = {}
PROBES: dict = {}


def _function(ref: str):
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _arg(spec, env):
    import jax
    import jax.numpy as jnp

    if not isinstance(spec, dict):
        return spec
    if "normal" in spec:
        return jnp.asarray(env.rng.normal(size=spec["normal"]), dtype=jnp.float32)
    if "zeros" in spec:
        return jnp.zeros(spec["zeros"], dtype=jnp.float32)
    if "ints" in spec:
        return jnp.asarray(env.rng.integers(0, spec.get("high", 2), size=spec["ints"]), dtype=jnp.int32)
    if "key" in spec:
        return jax.random.PRNGKey(spec["key"])
    if "asset" in spec:
        return os.path.join(env.assets or "", spec["asset"])
    return _function(spec["call"])(*[_arg(a, env) for a in spec.get("args", [])])


def _leaves(tree) -> list[tuple[str, object]]:
    import jax

    return [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _finite(tree) -> bool:
    import jax.numpy as jnp

    return all(
        bool(jnp.all(jnp.isfinite(leaf)))
        for _, leaf in _leaves(tree)
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact)
    )


def check_jit(env):
    """Every named function traces and runs under jax.jit, with finite outputs."""
    import jax

    out = {}
    for call in SPEC["jit"]:
        name = call["function"].replace(":", ".")
        result = jax.block_until_ready(jax.jit(_function(call["function"]))(*[_arg(a, env) for a in call["args"]]))
        out[f"{name}.traces"] = True
        out[f"{name}.finite"] = _finite(result)
    return out


def check_gradients(env):
    """Gradients of the loss w.r.t. its first argument are finite and reach every leaf."""
    import jax
    import jax.numpy as jnp

    call = SPEC["loss"]
    grads = jax.grad(_function(call["function"]))(*[_arg(a, env) for a in call["args"]])
    dead = [path for path, leaf in _leaves(grads) if not bool(jnp.any(leaf != 0))]
    return {"finite": _finite(grads), "live": not dead, "dead_leaves": ", ".join(dead[:20])}


def check_param_tree(env):
    """The converter's output has the candidate's own parameter tree: paths, shapes, dtypes."""
    call = SPEC["converter"]
    converted = dict(_leaves(_function(call["function"])(*[_arg(a, env) for a in call["args"]])))
    own = dict(_leaves(_arg(call["params"], env)))

    def shape(leaf):
        return (tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", type(leaf).__name__)))

    mismatched = sorted(p for p in own.keys() & converted.keys() if shape(own[p]) != shape(converted[p]))
    return {
        "same_paths": own.keys() == converted.keys(),
        "same_shapes_and_dtypes": not mismatched,
        "missing": ", ".join(sorted(own.keys() - converted.keys())[:20]),
        "extra": ", ".join(sorted(converted.keys() - own.keys())[:20]),
        "mismatched": ", ".join(mismatched[:20]),
    }


def check_entrypoints(env):
    """Every declared entry point exits 0 (run in the candidate root; {scratch} and {assets} filled in)."""
    out = {}
    paths = [p for p in sys.path if env.candidate and p.startswith(str(env.candidate))]
    child_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "HOME": str(env.scratch),
        "TMPDIR": str(env.scratch),
    }
    for i, argv in enumerate(SPEC["entrypoints"]):
        argv = [a.format(scratch=env.scratch, assets=env.assets or "") for a in argv]
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        try:
            done = subprocess.run(
                argv,
                cwd=env.candidate,
                env=child_env,
                capture_output=True,
                text=True,
                timeout=SPEC.get("entrypoint_timeout_s", 300.0),
            )
            ok, tail = done.returncode == 0, (done.stdout + done.stderr)[-400:]
        except subprocess.TimeoutExpired:
            ok, tail = False, "timed out"
        except OSError as exc:
            ok, tail = False, f"{type(exc).__name__}: {exc}"
        out[f"{i}.exits_zero"] = ok
        out[f"{i}.command"] = " ".join(argv)
        if not ok:
            out[f"{i}.output"] = tail
    return out
