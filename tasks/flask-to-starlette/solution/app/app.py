"""Bookshop: a small Starlette service with a catalog, sign-in and preferences.

Every route negotiates its representation from the Accept header (HTML by
default, JSON on request, CSV for the book list). The service keeps no state on
the server: who is signed in and the chosen preferences live in cookies.
Serve it with ``uvicorn app:app``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import time
from email.utils import formatdate
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from catalog import BOOKS
from negotiation import best_match, is_json, mimetype, parse_cookies, parse_query

SORT_KEYS = ("title", "year", "price")
THEMES = ("light", "dark")
LANGS = ("en", "de", "fr")
PREFS_MAX_AGE = 30 * 24 * 3600
USERNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
NEXT_RE = re.compile(r"^/[A-Za-z0-9/_-]*$")
PASSWORD = "hunter2"

STATUS_TEXT = {
    400: ("Bad Request", "The browser (or proxy) sent a request that this server could not understand."),
    404: (
        "Not Found",
        "The requested URL was not found on the server. If you entered the URL manually please check "
        "your spelling and try again.",
    ),
    405: ("Method Not Allowed", "The method is not allowed for the requested URL."),
    415: ("Unsupported Media Type", "The server does not support the media type transmitted in the request."),
    500: (
        "Internal Server Error",
        "The server encountered an internal error and was unable to complete your request. Either the "
        "server is overloaded or there is an error in the application.",
    ),
}


def escape(text: object) -> str:
    """HTML-escape like the original templates did (quotes as numeric references)."""
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("'", "&#39;")
        .replace('"', "&#34;")
    )


def preferred(request: Request, *offers: str) -> str:
    return best_match(request.headers.get("accept"), offers)


def json_response(data: object, status: int = 200) -> Response:
    body = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    return Response(body, status, media_type="application/json")


def page(title: str, body: str, status: int = 200) -> Response:
    html = f"<!doctype html>\n<title>{escape(title)}</title>\n<h1>{escape(title)}</h1>\n{body}\n"
    return Response(html, status, media_type="text/html")


def redirect(location: str) -> Response:
    target = escape(location)
    body = (
        "<!doctype html>\n<html lang=en>\n<title>Redirecting...</title>\n<h1>Redirecting...</h1>\n"
        f'<p>You should be redirected automatically to the target URL: <a href="{target}">{target}</a>. '
        "If not, click the link.\n"
    )
    return Response(body, 302, headers={"Location": location}, media_type="text/html")


def set_cookie(response: Response, name: str, value: str, *, max_age: int | None = None,
               httponly: bool = False, samesite: str | None = None) -> None:
    parts = [f"{name}={value}"]
    if max_age is not None:
        parts.append(f"Expires={formatdate(time.time() + max_age, usegmt=True)}")
        parts.append(f"Max-Age={max_age}")
    if httponly:
        parts.append("HttpOnly")
    parts.append("Path=/")
    if samesite:
        parts.append(f"SameSite={samesite}")
    response.raw_headers.append((b"set-cookie", "; ".join(parts).encode("latin-1")))


def delete_cookie(response: Response, name: str) -> None:
    header = f"{name}=; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/"
    response.raw_headers.append((b"set-cookie", header.encode("latin-1")))


def abort(status: int, description: str | None = None) -> HTTPException:
    return HTTPException(status, detail=description or STATUS_TEXT[status][1])


def http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    name, default = STATUS_TEXT.get(status, STATUS_TEXT[500])
    if isinstance(exc, HTTPException) and status in STATUS_TEXT and exc.detail != _starlette_phrase(status):
        description = exc.detail
    else:
        description = default
    if preferred(request, "text/html", "application/json") == "application/json":
        return json_response({"error": name, "status": status, "message": description}, status)
    return page(f"{status} {name}", f"<p>{escape(description)}</p>", status)


def _starlette_phrase(status: int) -> str:
    from http import HTTPStatus

    return HTTPStatus(status).phrase


def int_arg(args: dict[str, str], name: str, default: int) -> int:
    try:
        return int(args[name])
    except (KeyError, ValueError):
        return default


def cookies(request: Request) -> dict[str, str]:
    return parse_cookies(request.headers.get("cookie", ""))


def query(request: Request) -> dict[str, str]:
    return parse_query(request.scope["query_string"])


def book_html(book: dict) -> str:
    return (
        f"<li><a href=\"/books/{book['id']}\">{escape(book['title'])}</a> "
        f"by {escape(book['author'])} ({book['year']}), ${book['price']:.2f}</li>"
    )


async def index(request: Request) -> Response:
    if preferred(request, "text/html", "application/json") == "application/json":
        return json_response({"service": "bookshop", "books": len(BOOKS)})
    return page("Bookshop", f'<p>{len(BOOKS)} books. <a href="/books">Browse</a>.</p>')


async def list_books(request: Request) -> Response:
    args = query(request)
    text = args.get("q", "").strip()
    limit = int_arg(args, "limit", 10)
    offset = int_arg(args, "offset", 0)
    sort = args.get("sort", "title")
    if not 1 <= limit <= 50:
        raise abort(400, "limit must be between 1 and 50")
    if offset < 0:
        raise abort(400, "offset must not be negative")
    if sort not in SORT_KEYS:
        raise abort(400, f"sort must be one of {', '.join(SORT_KEYS)}")
    needle = text.casefold()
    found = [b for b in BOOKS if needle in b["title"].casefold() or needle in b["author"].casefold()]
    found.sort(key=lambda b: (b[sort], b["id"]))
    shown = found[offset : offset + limit]
    kind = preferred(request, "text/html", "application/json", "text/csv")
    if kind == "application/json":
        return json_response({"total": len(found), "offset": offset, "items": shown})
    if kind == "text/csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "title", "author", "year", "price"])
        for book in shown:
            writer.writerow([book["id"], book["title"], book["author"], book["year"], book["price"]])
        return Response(out.getvalue(), media_type="text/csv")
    heading = f"<p>{len(found)} results for &ldquo;{escape(text)}&rdquo;</p>" if text else ""
    items = "\n".join(book_html(b) for b in shown)
    return page("Books", f"{heading}<ul>\n{items}\n</ul>")


async def show_book(request: Request) -> Response:
    raw = request.path_params["book_id"]
    book_id = int(raw)
    book = next((b for b in BOOKS if b["id"] == book_id), None)
    if book is None:
        raise abort(404, f"no book with id {book_id}")
    if preferred(request, "text/html", "application/json") == "application/json":
        return json_response(book)
    return page(book["title"], f"<ul>\n{book_html(book)}\n</ul>")


async def read_json(request: Request) -> object:
    try:
        return json.loads(await request.body())
    except ValueError:
        return None


async def create_book(request: Request) -> Response:
    """Validate a new book and return it as it would be stored (the catalog is read-only)."""
    if not is_json(request.headers.get("content-type", "")):
        raise abort(415, "send the book as application/json")
    data = await read_json(request)
    if not isinstance(data, dict):
        raise abort(400, "the body must be a JSON object")
    title = data.get("title")
    author = data.get("author", "Anonymous")
    price = data.get("price")
    if not isinstance(title, str) or not title.strip():
        raise abort(400, "title must be a non-empty string")
    if not isinstance(author, str):
        raise abort(400, "author must be a string")
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
        raise abort(400, "price must be a non-negative number")
    book = {
        "id": max(b["id"] for b in BOOKS) + 1,
        "title": title.strip(),
        "author": author.strip() or "Anonymous",
        "year": None,
        "price": round(float(price), 2),
    }
    response = json_response(book, 201)
    response.headers["Location"] = f"/books/{book['id']}"
    return response


async def search(request: Request) -> Response:
    text = query(request).get("q", "").strip()
    if not text:
        return redirect("/books")
    return redirect("/books?" + urlencode([("q", text)], safe="!$'()*,/:;?@"))


async def form(request: Request) -> dict[str, str]:
    if mimetype(request.headers.get("content-type", "")) != "application/x-www-form-urlencoded":
        return {}
    return parse_query(await request.body())


async def login(request: Request) -> Response:
    fields = await form(request)
    username = fields.get("username", "").strip()
    password = fields.get("password", "")
    target = query(request).get("next", "/account")
    if not NEXT_RE.match(target) or target.startswith("//"):
        target = "/account"
    if not USERNAME_RE.match(username):
        raise abort(400, "username must be 1 to 32 letters, digits, '_', '.' or '-'")
    if password != PASSWORD:
        if preferred(request, "text/html", "application/json") == "application/json":
            return json_response({"error": "invalid credentials"}, 401)
        return page("Sign-in failed", "<p>Invalid credentials.</p>", 401)
    response = redirect(target)
    set_cookie(response, "user", username, httponly=True)
    return response


async def account(request: Request) -> Response:
    user = cookies(request).get("user")
    if not user:
        return redirect("/login?next=/account")
    if preferred(request, "text/html", "application/json") == "application/json":
        return json_response({"user": user})
    return page("Account", f"<p>Signed in as {escape(user)}.</p>")


async def logout(request: Request) -> Response:
    response = redirect("/")
    delete_cookie(response, "user")
    return response


def current_prefs(request: Request) -> dict[str, str]:
    jar = cookies(request)
    theme, lang = jar.get("theme", "light"), jar.get("lang", "en")
    return {"theme": theme if theme in THEMES else "light", "lang": lang if lang in LANGS else "en"}


async def prefs(request: Request) -> Response:
    current = current_prefs(request)
    if request.method == "GET":
        return json_response(current)
    if is_json(request.headers.get("content-type", "")):
        data = await read_json(request)
        if not isinstance(data, dict):
            raise abort(400, "the body must be a JSON object")
    else:
        data = await form(request)
    updated = dict(current)
    for key, allowed in (("theme", THEMES), ("lang", LANGS)):
        if key in data:
            value = data[key]
            if value not in allowed:
                raise abort(400, f"{key} must be one of {', '.join(allowed)}")
            updated[key] = value
    response = json_response(updated)
    for key, value in updated.items():
        if value != current[key]:
            set_cookie(response, key, value, max_age=PREFS_MAX_AGE, samesite="Lax")
    return response


async def boom(request: Request) -> Response:
    raise RuntimeError("this route always fails")


routes = [
    Route("/", index, methods=["GET"]),
    Route("/books", list_books, methods=["GET"]),
    Route("/books", create_book, methods=["POST"]),
    Route("/books/{book_id:int}", show_book, methods=["GET"]),
    Route("/search", search, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/account", account, methods=["GET"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/prefs", prefs, methods=["GET", "PUT"]),
    Route("/boom", boom, methods=["GET"]),
]

app = Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: http_error})
app.router.redirect_slashes = False
