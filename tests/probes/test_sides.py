"""Taking a side's outputs back: regular files only, never through a link the side made."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from probes.sides import OUTPUT_FILES, HostileOutput, _take_back

SECRET = "SIDES-SECRET-77aa"


@pytest.mark.parametrize("name", ["manifest.json", "error.json", "arrays.npz"])
def test_an_output_linked_to_hidden_files_brings_nothing_back(tmp_path, name):
    hidden = tmp_path / "tests"
    hidden.mkdir()
    (hidden / "refs.json").write_text(json.dumps({"outputs": {"x": SECRET}}))
    np.savez(hidden / "refs.npz", secret=np.array([7.0]))
    side = tmp_path / "side"
    side.mkdir()
    (side / name).symlink_to(hidden / ("refs.npz" if name.endswith(".npz") else "refs.json"))
    with pytest.raises(HostileOutput):
        _take_back(side, tmp_path / "layout", OUTPUT_FILES)
    assert not (tmp_path / "layout" / name).exists()


def test_a_fifo_output_is_refused_without_hanging(tmp_path):
    side = tmp_path / "side"
    side.mkdir()
    os.mkfifo(side / "manifest.json")
    with pytest.raises(HostileOutput):
        _take_back(side, tmp_path / "layout", OUTPUT_FILES)


def lose_the_work_directory(ctx, side: str) -> None:
    """`side`'s sandbox as it is when its capped work directory was unmounted under it: what the side
    wrote went to a filesystem no longer at its work directory, and the sandbox says the root was lost."""
    from ground.agent_tree import remove_tree

    sandbox, work = ctx.sandbox(side), ctx.side_work(side)
    real_exec = sandbox.exec

    def exec_into_a_lost_root(*args, **kwargs):
        result = real_exec(*args, **kwargs)
        remove_tree(work)
        work.mkdir()
        return result

    sandbox.exec = exec_into_a_lost_root
    sandbox.lost_roots = lambda: [f"the capped filesystem of {work} was unmounted while in use"]


@pytest.mark.parametrize("side", ["candidate", "reference"])
def test_a_side_whose_work_directory_was_lost_is_an_infrastructure_outcome(tmp_path, side):
    """Outputs lost with the side's work filesystem read as 'ended without its outputs' (violated on the
    candidate side) unless the lost root is seen: it is twin's failure, and nothing of it is cached."""
    from probe_fixtures import CANDIDATES, FIXTURES, TINY

    from evidence_store.records import Outcome
    from probes.context import make_context
    from probes.differential import differential_probe
    from task_model.loader import load_task

    cache = tmp_path / "reference-cache"
    ctx = make_context(
        load_task(TINY), CANDIDATES / "good", sandbox_kind="none", workdir=tmp_path / "work", reference_cache=cache
    )
    lose_the_work_directory(ctx, side)
    (result,) = differential_probe(str(FIXTURES / "probe_numpy.py"), "affine")(ctx)
    ctx.close()
    assert result.outcome is Outcome.NOT_ESTABLISHED, (result.observations, result.trace)
    assert f"failed on the {side} side (infrastructure)" in result.observations["message"]
    assert "was unmounted while in use" in result.trace
    assert not list(cache.glob("*/done")) if side == "reference" else list(cache.glob("*/done"))
