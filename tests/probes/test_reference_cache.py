"""The reference cache is keyed by what the original's files hold, not by their sizes and times."""

from __future__ import annotations

import os
import shutil

from probe_fixtures import CANDIDATES, FIXTURES, TINY

from probes.context import make_context
from probes.differential import differential_probe
from task_model.loader import load_task

NUMPY_PROBES = FIXTURES / "probe_numpy.py"


def _affine(task_root, workdir, cache):
    ctx = make_context(
        load_task(task_root), CANDIDATES / "good", sandbox_kind="none", workdir=workdir, reference_cache=cache
    )
    (result,) = differential_probe(str(NUMPY_PROBES), "affine")(ctx)
    return result


def test_an_edit_of_the_original_that_keeps_size_and_time_is_a_new_reference(tmp_path):
    task = tmp_path / "tiny"
    shutil.copytree(TINY, task)
    cache = tmp_path / "cache"
    _affine(task, tmp_path / "a", cache)
    _affine(task, tmp_path / "b", cache)
    assert len(list(cache.glob("*/done"))) == 1  # the same original: kept once, re-used
    source = load_task(task).source_dir
    edited = next(p for p in sorted(source.rglob("*.py")) if p.stat().st_size > 0)
    st = edited.stat()
    data = edited.read_bytes()
    edited.write_bytes(data[:-1] + (b" " if data[-1:] != b" " else b"\n"))
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert edited.stat().st_size == st.st_size and edited.stat().st_mtime_ns == st.st_mtime_ns
    _affine(task, tmp_path / "c", cache)
    assert len(list(cache.glob("*/done"))) == 2
