"""Request spaces and service commands for searching the Bookshop (flask-to-starlette) task.

Only visible information is used: the routes, parameters and cookies the original
in `environment/source` reads.
"""

from __future__ import annotations

ACCEPT = [
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
]
TEXT = {"free_text": True, "max_size": 6}

SIDES = {
    "reference": {
        "server": {
            "argv": ["{python}", "-m", "flask", "--app", "app", "run", "--port", "{port}"],
            "cwd": "{root}",
            "startup_s": 60,
        }
    },
    "candidate": {
        "server": {
            "argv": [
                "{python}",
                "-m",
                "uvicorn",
                "app:app",
                "--port",
                "{port}",
                "--log-level",
                "warning",
            ],
            "cwd": "{root}",
            "startup_s": 60,
        }
    },
}

SPACES = {
    "catalog": {
        "methods": ["GET"],
        "paths": ["/books", "/books/{int}", "/", "/search"],
        "query": {
            "q": {"values": ["the", "Knuth", "", "  code "], **TEXT},
            "limit": {"values": ["1", "3", "0", "50", "51", "-3", "abc", " 7", "+2"]},
            "offset": {"values": ["0", "2", "11", "-1", "x"]},
            "sort": {"values": ["title", "year", "price", "author", "Title"]},
        },
        "accept": ACCEPT,
    },
    "create": {
        "methods": ["POST"],
        "paths": ["/books"],
        "json_fields": {
            "title": {"values": ["Dune", "", "  ", 7, None], **TEXT},
            "author": {"values": ["Herbert", "", 3], **TEXT},
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
        "query": {"next": {"values": ["/books", "//evil", "/a b", "http://x", "/books/3"], **TEXT}},
        "form": {
            "username": {"values": ["ann", " bob ", "", "x" * 33, "a.b-c_d", "ann\n"], **TEXT},
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
        "cookies": {"user": {"values": ["ann", "", '"ann"', "a b"], **TEXT}},
        "accept": ["application/json", "text/html", "*/*"],
    },
    "prefs": {
        "methods": ["GET", "PUT"],
        "paths": ["/prefs"],
        "form": {
            "theme": {"values": ["dark", "light", "blue", ""]},
            "lang": {"values": ["de", "fr", "en", "xx"]},
        },
        "json_fields": {
            "theme": {"values": ["dark", "light", "blue", 1]},
            "lang": {"values": ["de", "fr", "en", None]},
        },
        "cookies": {
            "theme": {"values": ["dark", "light", "neon"]},
            "lang": {"values": ["de", "fr", "en", "es"]},
        },
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
        "paths": [
            "/boom",
            "/nope",
            "/books/",
            "/books/{text}",
            "/{text}",
            "/prefs",
            "/logout",
            "/account",
        ],
        "accept": ACCEPT,
    },
}
