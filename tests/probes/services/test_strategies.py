"""Request, process and API spaces: well-formed inputs, every declared part reachable."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark_adapter.grading.sweep import load_defects
from probes.services.strategies import (
    ApiSpace,
    Pool,
    ProcessSpace,
    RequestSpace,
    api_strategy,
    process_strategy,
    request_strategy,
    strategy_for,
)

SPACE = RequestSpace(
    methods=["GET", "POST"],
    paths=["/items", "/items/{int}", "/x/{text}"],
    query={"q": Pool(values=["a"], free_text=True)},
    accept=["text/html", "application/json"],
    cookies={"user": Pool(values=["ann"])},
    form={"name": Pool(values=["n"])},
    content_types=["application/x-www-form-urlencoded; charset=utf-8"],
)


def bookshop_defect(name: str):
    path = (
        Path(__file__).resolve().parents[2]
        / "benchmark_adapter"
        / "defects"
        / "flask_to_starlette.py"
    )
    return next(d for d in load_defects(path) if d.name == name)


@settings(max_examples=100, deadline=None)
@given(request_strategy(SPACE))
def test_requests_are_well_formed(request):
    assert request["method"] in ("GET", "POST")
    path = request["target"].split("?")[0]
    assert path in ("/items",) or path.startswith(("/items/", "/x/"))
    if path.startswith("/x/"):
        assert "/" not in path.removeprefix("/x/")  # drawn segments never hold a slash
    names = [h[0] for h in request["headers"]]
    assert len(names) == len(set(names))
    if "body" in request:
        assert "Content-Type" in names


def test_every_part_of_the_space_is_reached():
    seen = set()

    @settings(max_examples=150, deadline=None, database=None)
    @given(request_strategy(SPACE))
    def collect(request):
        names = {h[0] for h in request["headers"]}
        seen.update(names)
        if request["target"].count("q=") == 2:
            seen.add("repeated")
        if "body" in request:
            seen.add("body")

    collect()
    assert {"Accept", "Cookie", "Content-Type", "repeated", "body"} <= seen


def test_required_body_is_always_there():
    space = SPACE.model_copy(update={"body_optional": False})

    @settings(max_examples=50, deadline=None, database=None)
    @given(request_strategy(space))
    def check(request):
        assert "body" in request

    check()


@settings(max_examples=50, deadline=None)
@given(
    process_strategy(
        ProcessSpace(
            argv=["{python}", "cli.py"],
            args=[Pool(values=["x"])],
            flags=["-v"],
            files={"in.txt": Pool(values=["1"])},
        )
    ),
    api_strategy(
        ApiSpace(call="m:f", args=[Pool(values=[1, 2])], kwargs={"k": Pool(values=[True])})
    ),
)
def test_process_and_api_inputs(run, case):
    assert run["argv"][:2] == ["{python}", "cli.py"]
    assert set(run["files"]) <= {"in.txt"}
    [call] = case["calls"]
    assert call["call"] == "m:f" and call["args"][0] in (1, 2)


def test_spaces_given_as_data():
    strategy = strategy_for("http", {"paths": ["/"], "accept": ["text/html"]})
    assert isinstance(strategy, st.SearchStrategy)
