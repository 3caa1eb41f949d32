"""Bookshop (flask-to-starlette): matched requests and request spaces for the counterexample search.

Written from the visible task only: the requests in /assets/requests.http, and the
routes, parameters, headers and cookies the original in /source reads (`listing`: the
three representations /books renders, with queries whose case and characters the
original folds and escapes). How each side
is started is the task's (`[metadata.twin.services.http]`: `flask run` for the
original, `uvicorn app:app` from /app for the candidate, as the instruction says).
"""

SERVICES = {
    "kind": "http",
    "cases": [
        {
            "name": "books_query_json",
            "input": {
                "method": "GET",
                "target": "/books?q=the&limit=3&sort=year",
                "headers": [["Accept", "application/json"]],
            },
        },
        {"name": "book_html", "input": {"method": "GET", "target": "/books/7", "headers": [["Accept", "text/html"]]}},
        {
            "name": "login_redirect",
            "input": {
                "method": "POST",
                "target": "/login?next=/books",
                "headers": [["Content-Type", "application/x-www-form-urlencoded"]],
                "body": {"text": "username=ann&password=hunter2"},
            },
        },
        {
            "name": "prefs_put_json",
            "input": {
                "method": "PUT",
                "target": "/prefs",
                "headers": [["Content-Type", "application/json"], ["Cookie", "lang=de"]],
                "body": {"text": '{"theme": "dark"}'},
            },
        },
    ],
    "spaces": {
        "listing": {
            "methods": ["GET"],
            "paths": ["/books", "/search"],
            "query": {
                "q": {"values": ["the", "THE", "knuth", "Art", '"', "<a&b>", "it's"]},
                "limit": {"values": ["3", "50"]},
            },
            "accept": ["text/csv", "text/html", "application/json"],
        },
        "catalog": {
            "methods": ["GET"],
            "paths": ["/books", "/books/{int}", "/", "/search"],
            "query": {
                "q": {"values": ["the", "Knuth", "", "  code "], "free_text": True, "max_size": 6},
                "limit": {"values": ["1", "3", "0", "50", "51", "-3", "abc", " 7", "+2"]},
                "offset": {"values": ["0", "2", "11", "-1", "x"]},
                "sort": {"values": ["title", "year", "price", "author", "Title"]},
            },
            "accept": [
                "text/html",
                "application/json",
                "text/csv",
                "*/*",
                "application/*",
                "text/*",
                "text/plain",
                "application/xml",
                "TEXT/HTML",
                "application/json; charset=utf-8",
            ],
        },
        "create": {
            "methods": ["POST"],
            "paths": ["/books"],
            "json_fields": {
                "title": {"values": ["Dune", "", "  ", 7, None], "free_text": True, "max_size": 6},
                "author": {"values": ["Herbert", "", 3], "free_text": True, "max_size": 6},
                "price": {"values": [0, 9.999, 12.5, -1, "5", True, 1e308, 2.675]},
            },
            "content_types": [
                "application/json",
                "application/json; charset=utf-8",
                "Application/JSON",
                "application/vnd.api+json",
                "text/plain",
                "application/x-www-form-urlencoded",
            ],
            "raw_bodies": ["{", "[]", "null", '{"title": "A", "price": 1}'],
            "accept": ["application/json", "text/html", "*/*"],
        },
        "login": {
            "methods": ["POST"],
            "paths": ["/login"],
            "query": {
                "next": {
                    "values": ["/books", "//evil", "/a b", "http://x", "/books/3"],
                    "free_text": True,
                    "max_size": 6,
                }
            },
            "form": {
                "username": {
                    "values": ["ann", " bob ", "", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "a.b-c_d", "ann\n"],
                    "free_text": True,
                    "max_size": 6,
                },
                "password": {"values": ["hunter2", "hunter", "", " hunter2"]},
            },
            "content_types": [
                "application/x-www-form-urlencoded",
                "application/x-www-form-urlencoded; charset=utf-8",
                "text/plain",
            ],
            "body_optional": False,
            "accept": ["application/json", "text/html", "*/*"],
        },
        "session": {
            "methods": ["GET", "POST"],
            "paths": ["/account", "/logout"],
            "cookies": {"user": {"values": ["ann", "", '"ann"', "a b"], "free_text": True, "max_size": 6}},
            "accept": ["application/json", "text/html", "*/*"],
        },
        "prefs": {
            "methods": ["GET", "PUT"],
            "paths": ["/prefs"],
            "form": {"theme": {"values": ["dark", "light", "blue", ""]}, "lang": {"values": ["de", "fr", "en", "xx"]}},
            "json_fields": {
                "theme": {"values": ["dark", "light", "blue", 1]},
                "lang": {"values": ["de", "fr", "en", None]},
            },
            "cookies": {"theme": {"values": ["dark", "light", "neon"]}, "lang": {"values": ["de", "fr", "en", "es"]}},
            "content_types": [
                "application/json",
                "application/x-www-form-urlencoded",
                "text/plain",
                "APPLICATION/JSON",
            ],
            "raw_bodies": ["[1]", "nope"],
            "accept": ["application/json", "text/html"],
        },
        "errors": {
            "methods": ["GET", "POST", "PUT", "DELETE"],
            "paths": ["/boom", "/nope", "/books/", "/books/{text}", "/{text}", "/prefs", "/logout", "/account"],
            "accept": [
                "text/html",
                "application/json",
                "text/csv",
                "*/*",
                "application/*",
                "text/*",
                "text/plain",
                "application/xml",
                "TEXT/HTML",
                "application/json; charset=utf-8",
            ],
        },
    },
}
