"""Comparisons: what is compared, what is deliberately not, and that loosening shows."""

from __future__ import annotations

import pytest

from probes.services.compare import Comparison, ProbeCannotTell, differences, loosenings


def answer(status=200, headers=(), body="", **extra):
    return {
        "status": status,
        "headers": [list(h) for h in headers],
        "body": {"text": body},
        **extra,
    }


HTTP = Comparison(kind="http")


def test_server_headers_and_cookie_expiry_are_not_compared():
    ref = answer(
        headers=[
            ("Date", "Mon"),
            ("Server", "Werkzeug"),
            ("Content-Type", "text/html"),
            ("Set-Cookie", "a=1; Expires=Mon, 01 Jan 2030 00:00:00 GMT; Max-Age=5; Path=/"),
        ]
    )
    cand = answer(
        headers=[
            ("date", "Tue"),
            ("server", "uvicorn"),
            ("content-type", "text/html"),
            ("set-cookie", "a=1; Path=/; Max-Age=5; expires=Tue, 02 Jan 2030 00:00:00 GMT"),
        ]
    )
    assert differences(HTTP, ref, cand) == []


@pytest.mark.parametrize(
    "cand, expected",
    [
        (answer(status=307), "status: 200 != 307"),
        (answer(headers=[("Content-Type", "text/html; charset=utf-8")]), "header content-type"),
        (
            answer(headers=[("Content-Type", "text/html"), ("Set-Cookie", "a=1; Max-Age=5")]),
            "set-cookie",
        ),
        (answer(headers=[("Content-Type", "text/html")], body="x"), "body"),
    ],
)
def test_each_http_field_can_differ(cand, expected):
    ref = (
        answer(headers=[("Content-Type", "text/html"), ("Set-Cookie", "a=1; Max-Age=5; Path=/")])
        if expected == "set-cookie"
        else answer(headers=[("Content-Type", "text/html")])
    )
    found = differences(HTTP, ref, cand)
    assert found and found[0].startswith(expected)


def test_json_bodies_compare_parsed_with_ignored_paths():
    ref = answer(
        headers=[("Content-Type", "application/json")],
        body='{"a":1,"t":"12:00","items":[{"id":1,"at":1}]}\n',
    )
    cand = answer(
        headers=[("Content-Type", "application/json")],
        body='{"items":[{"at":2,"id":1}],"t":"12:01","a":1}',
    )
    assert differences(HTTP, ref, cand) != []
    loose = Comparison(kind="http", ignore_json_paths=["t", "items.*.at"])
    assert differences(loose, ref, cand) == []
    exact = Comparison(kind="http", body="exact")
    same_json = answer(headers=[("Content-Type", "application/json")], body='{"a": 1}')
    assert differences(
        exact, answer(headers=[("Content-Type", "application/json")], body='{"a":1}'), same_json
    )


def test_driver_failure_is_not_a_verdict():
    with pytest.raises(ProbeCannotTell):
        differences(HTTP, {"driver_error": "Traceback"}, answer())
    with pytest.raises(ProbeCannotTell):
        differences(HTTP, {"transport_error": "refused"}, answer())
    assert differences(HTTP, answer(), {"transport_error": "reset"})[0].startswith(
        "candidate did not answer"
    )


def test_loosenings_are_named_and_tightening_is_not():
    base = Comparison(kind="http")
    assert loosenings(base, base) == []
    assert loosenings(
        base, Comparison(kind="http", ignore_headers=base.ignore_headers + ["Location"])
    ) == ["ignore_headers adds location"]
    assert "status no longer compared" in loosenings(base, Comparison(kind="http", status=False))
    assert "body no longer compared" in loosenings(base, Comparison(kind="http", body="ignore"))
    assert loosenings(Comparison(kind="http", body="ignore"), base) == []
    assert base.digest() != Comparison(kind="http", body="exact").digest()
    assert base.digest() == Comparison(kind="http").digest()


def test_python_api_values_keep_types():
    cmp = Comparison(kind="python_api")
    ref = {"calls": [{"value": {"$tuple": [{"$int": "1"}]}}]}
    assert differences(cmp, ref, {"calls": [{"value": {"$list": [{"$int": "1"}]}}]})
    assert differences(cmp, ref, {"calls": [{"raised": "KeyError", "message": "x"}]})
    assert differences(cmp, ref, ref) == []
