"""Bookshop: a small Flask service with a catalog, sign-in and preferences.

Every route negotiates its representation from the Accept header (HTML by
default, JSON on request, CSV for the book list). The service keeps no state on
the server: who is signed in and the chosen preferences live in cookies.
"""

import csv
import io
import math
import re

from flask import Flask, jsonify, make_response, redirect, request, url_for
from markupsafe import escape
from werkzeug.exceptions import BadRequest, HTTPException, NotFound, UnsupportedMediaType

from catalog import BOOKS

app = Flask(__name__)

SORT_KEYS = ("title", "year", "price")
THEMES = ("light", "dark")
LANGS = ("en", "de", "fr")
PREFS_MAX_AGE = 30 * 24 * 3600
USERNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
NEXT_RE = re.compile(r"^/[A-Za-z0-9/_-]*$")
PASSWORD = "hunter2"


def preferred(*offers):
    """The offer the client prefers (Accept header), HTML when it has no preference."""
    return request.accept_mimetypes.best_match(offers, default=offers[0])


def page(title, body, status=200):
    html = f"<!doctype html>\n<title>{escape(title)}</title>\n<h1>{escape(title)}</h1>\n{body}\n"
    return make_response(html, status)


def book_html(book):
    return (
        f"<li><a href=\"/books/{book['id']}\">{escape(book['title'])}</a> "
        f"by {escape(book['author'])} ({book['year']}), ${book['price']:.2f}</li>"
    )


@app.errorhandler(HTTPException)
def http_error(exc):
    if preferred("text/html", "application/json") == "application/json":
        body = {"error": exc.name, "status": exc.code, "message": exc.description}
        return jsonify(body), exc.code
    return page(f"{exc.code} {exc.name}", f"<p>{escape(exc.description)}</p>", exc.code)


@app.get("/")
def index():
    if preferred("text/html", "application/json") == "application/json":
        return jsonify({"service": "bookshop", "books": len(BOOKS)})
    return page("Bookshop", f'<p>{len(BOOKS)} books. <a href="/books">Browse</a>.</p>')


@app.get("/books")
def list_books():
    query = request.args.get("q", "").strip()
    limit = request.args.get("limit", 10, type=int)
    offset = request.args.get("offset", 0, type=int)
    sort = request.args.get("sort", "title")
    if not 1 <= limit <= 50:
        raise BadRequest("limit must be between 1 and 50")
    if offset < 0:
        raise BadRequest("offset must not be negative")
    if sort not in SORT_KEYS:
        raise BadRequest(f"sort must be one of {', '.join(SORT_KEYS)}")
    needle = query.casefold()
    found = [b for b in BOOKS if needle in b["title"].casefold() or needle in b["author"].casefold()]
    found.sort(key=lambda b: (b[sort], b["id"]))
    shown = found[offset : offset + limit]
    kind = preferred("text/html", "application/json", "text/csv")
    if kind == "application/json":
        return jsonify({"total": len(found), "offset": offset, "items": shown})
    if kind == "text/csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "title", "author", "year", "price"])
        for book in shown:
            writer.writerow([book["id"], book["title"], book["author"], book["year"], book["price"]])
        response = make_response(out.getvalue())
        response.mimetype = "text/csv"
        return response
    heading = f"<p>{len(found)} results for &ldquo;{escape(query)}&rdquo;</p>" if query else ""
    items = "\n".join(book_html(b) for b in shown)
    return page("Books", f"{heading}<ul>\n{items}\n</ul>")


@app.get("/books/<int:book_id>")
def show_book(book_id):
    book = next((b for b in BOOKS if b["id"] == book_id), None)
    if book is None:
        raise NotFound(f"no book with id {book_id}")
    if preferred("text/html", "application/json") == "application/json":
        return jsonify(book)
    return page(book["title"], f"<ul>\n{book_html(book)}\n</ul>")


@app.post("/books")
def create_book():
    """Validate a new book and return it as it would be stored (the catalog is read-only)."""
    if not request.is_json:
        raise UnsupportedMediaType("send the book as application/json")
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    title = data.get("title")
    author = data.get("author", "Anonymous")
    price = data.get("price")
    if not isinstance(title, str) or not title.strip():
        raise BadRequest("title must be a non-empty string")
    if not isinstance(author, str):
        raise BadRequest("author must be a string")
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
        raise BadRequest("price must be a non-negative number")
    book = {
        "id": max(b["id"] for b in BOOKS) + 1,
        "title": title.strip(),
        "author": author.strip() or "Anonymous",
        "year": None,
        "price": round(float(price), 2),
    }
    response = jsonify(book)
    response.status_code = 201
    response.headers["Location"] = f"/books/{book['id']}"
    return response


@app.get("/search")
def search():
    query = request.args.get("q", "").strip()
    if not query:
        return redirect(url_for("list_books"))
    return redirect(url_for("list_books", q=query))


@app.post("/login")
def login():
    username = request.form.get("username", "").strip()
    password = request.form.get("password", "")
    target = request.args.get("next", "/account")
    if not NEXT_RE.match(target) or target.startswith("//"):
        target = "/account"
    if not USERNAME_RE.match(username):
        raise BadRequest("username must be 1 to 32 letters, digits, '_', '.' or '-'")
    if password != PASSWORD:
        if preferred("text/html", "application/json") == "application/json":
            return jsonify({"error": "invalid credentials"}), 401
        return page("Sign-in failed", "<p>Invalid credentials.</p>", 401)
    response = redirect(target)
    response.set_cookie("user", username, httponly=True)
    return response


@app.get("/account")
def account():
    user = request.cookies.get("user")
    if not user:
        return redirect("/login?next=/account")
    if preferred("text/html", "application/json") == "application/json":
        return jsonify({"user": user})
    return page("Account", f"<p>Signed in as {escape(user)}.</p>")


@app.post("/logout")
def logout():
    response = redirect("/")
    response.delete_cookie("user")
    return response


def current_prefs():
    theme = request.cookies.get("theme", "light")
    lang = request.cookies.get("lang", "en")
    return {"theme": theme if theme in THEMES else "light", "lang": lang if lang in LANGS else "en"}


@app.route("/prefs", methods=["GET", "PUT"])
def prefs():
    current = current_prefs()
    if request.method == "GET":
        return jsonify(current)
    if request.is_json:
        data = request.get_json(silent=True)
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
    else:
        data = request.form
    updated = dict(current)
    for key, allowed in (("theme", THEMES), ("lang", LANGS)):
        if key in data:
            value = data[key]
            if value not in allowed:
                raise BadRequest(f"{key} must be one of {', '.join(allowed)}")
            updated[key] = value
    response = jsonify(updated)
    for key, value in updated.items():
        if value != current[key]:
            response.set_cookie(key, value, max_age=PREFS_MAX_AGE, samesite="Lax")
    return response


@app.get("/boom")
def boom():
    raise RuntimeError("this route always fails")
