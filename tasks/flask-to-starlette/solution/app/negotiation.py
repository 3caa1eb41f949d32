"""HTTP header parsing the shop relies on: Accept negotiation, Content-Type, cookies, queries.

The rules follow RFC 9110 the way the original service applied them: media ranges
are ordered by specificity and then quality, items with an invalid ``q`` are
skipped, and ties keep the server's order of offers.
"""

from __future__ import annotations

import codecs
import re
from urllib.parse import parse_qsl, quote

_Q_VALUE = re.compile(r"-?\d+(\.\d+)?", re.ASCII)
_MIME_SPLIT = re.compile(r"/|(?:[ \t]*;[ \t]*)")
_COOKIE = re.compile(
    r"""
    [ \t]*
    ([^ \t=";]+)
    (?:[ \t]*=[ \t]*
        (
            "(?:[^\\"]|\\.)*"
        |
            [^ \t";]*
        )
    )?
    [ \t]*
    (?:;|\Z)
    """,
    flags=re.ASCII | re.VERBOSE,
)
_COOKIE_UNSLASH = re.compile(rb"\\([0-3][0-7]{2}|.)")


def _requote_invalid(error: UnicodeError) -> tuple[str, int]:
    return quote(error.object[error.start : error.end], safe=""), error.end  # type: ignore[attr-defined]


codecs.register_error("bookshop.requote", _requote_invalid)


def split_list(value: str) -> list[str]:
    """Split a comma-separated header, keeping quoted strings whole."""
    items, item, escape, quoted = [], "", False, False
    for char in value:
        if escape:
            escape = False
            item += char
        elif quoted and char == "\\":
            escape = True
            item += char
        elif char == '"':
            quoted = not quoted
            item += char
        elif char == "," and not quoted:
            items.append(item)
            item = ""
        else:
            item += char
    items.append(item)
    return [i.strip(" \t") for i in items if i.strip(" \t")]


def split_options(value: str) -> tuple[str, dict[str, str]]:
    """``text/html; q=0.5; level=1`` -> (``text/html``, {``q``: ``0.5``, ``level``: ``1``})."""
    head, _, rest = value.partition(";")
    head = head.strip(" \t")
    options: dict[str, str] = {}
    if not head or not rest.strip(" \t"):
        return head, options
    for part in rest.split(";"):
        key, sep, val = part.partition("=")
        key, val = key.strip(" \t").lower(), val.strip(" \t")
        if not sep or not key or not val or '"' in key:
            continue
        if val.startswith('"') and val.endswith('"') and len(val) >= 2:
            val = val[1:-1].replace('\\"', '"').replace("%22", '"')
        elif '"' in val:
            continue
        options[key] = val
    return head, options


def mimetype(content_type: str) -> str:
    """The media type of a Content-Type header, lower-cased, without parameters."""
    return split_options(content_type)[0].lower()


def is_json(content_type: str) -> bool:
    kind = mimetype(content_type)
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _parse_accept(header: str) -> list[tuple[str, float]]:
    ranges: list[tuple[str, float]] = []
    for raw in split_list(header):
        item, options = split_options(raw)
        quality = 1.0
        if "q" in options:
            text = options.pop("q").strip(" \t")
            if _Q_VALUE.fullmatch(text) is None:
                continue
            quality = float(text)
            if quality < 0 or quality > 1:
                continue
        if options:
            item = item + "".join(f"; {k}={v}" for k, v in options.items())
        ranges.append((item, quality))
    return sorted(ranges, key=lambda r: (_specificity(r[0]), r[1]), reverse=True)


def _specificity(value: str) -> tuple[bool, ...]:
    return tuple(x != "*" for x in _MIME_SPLIT.split(value))


def _matches(offer: str, item: str) -> bool:
    if "/" not in item:
        return False
    offer_parts = _MIME_SPLIT.split(offer.lower())
    item_parts = _MIME_SPLIT.split(item.lower())
    o_type, o_sub, o_params = offer_parts[0], offer_parts[1], sorted(offer_parts[2:])
    i_type, i_sub, i_params = item_parts[0], item_parts[1], sorted(item_parts[2:])
    if i_type == "*" and i_sub != "*":
        return False
    if i_type == "*" and i_sub == "*":
        return True
    return i_type == o_type and (i_sub == "*" or (i_sub == o_sub and i_params == o_params))


def best_match(accept: str | None, offers: tuple[str, ...]) -> str:
    """The offer the client prefers; the first offer when the client states no preference."""
    ranges = _parse_accept(accept) if accept else []
    result, best_quality, best_spec = offers[0], -1.0, (-1,)
    for offer in offers:
        match = next(((item, q) for item, q in ranges if _matches(offer, item)), None)
        if match is None:
            continue
        item, quality = match
        spec = _specificity(item)
        if quality <= 0 or quality < best_quality:
            continue
        if quality > best_quality or spec > best_spec:
            result, best_quality, best_spec = offer, quality, spec
    return result


def parse_query(raw: bytes) -> dict[str, str]:
    """First value of each query (or urlencoded form) parameter."""
    values: dict[str, str] = {}
    for key, value in parse_qsl(raw.decode(), keep_blank_values=True, errors="bookshop.requote"):
        values.setdefault(key, value)
    return values


def parse_cookies(header: str) -> dict[str, str]:
    """Cookies of a Cookie header; the first occurrence of a name wins."""
    cookies: dict[str, str] = {}
    pos = 0
    while True:
        match = _COOKIE.match(header, pos)
        if match is None:
            pos = header.find(";", pos) + 1
            if pos == 0:
                break
            continue
        name, value = match.groups()
        pos = match.end()
        value = value or ""
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = _COOKIE_UNSLASH.sub(
                lambda m: m.group(1) if len(m.group(1)) == 1 else int(m.group(1), 8).to_bytes(1, "big"),
                value[1:-1].encode(),
            ).decode(errors="replace")
        cookies.setdefault(name, value)
        if pos >= len(header):
            break
    return cookies
