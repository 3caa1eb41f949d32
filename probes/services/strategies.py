"""Declarative input spaces and the `hypothesis` strategies drawn from them.

A space is data (so a Verifier can ask for one in JSON and a record can keep it):
which methods, path templates, query parameters, headers, cookies and bodies an
HTTP request may have; which argv, stdin and files a process run may get; which
calls a Python API case may make. Each pool holds literal values the search picks
from, and free text is drawn from a small alphabet where a pool allows it, so that
shrinking ends at a short, readable reproducer.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, Field

DEFAULT_ALPHABET = "ab Z09-_.~/%+&=;,\"'<>é"


class Pool(BaseModel):
    """Values to choose from, optionally plus free text."""

    values: list[Any] = Field(default_factory=list, description="Literal values (JSON types).")
    free_text: bool = Field(
        default=False, description="Also draw short free text from the alphabet."
    )
    max_size: int = Field(default=8, description="Longest free text drawn.")


class RequestSpace(BaseModel):
    """Where HTTP requests are drawn from."""

    methods: list[str] = Field(default_factory=lambda: ["GET"])
    paths: list[str] = Field(description="Path templates; '{int}' and '{text}' are drawn.")
    query: dict[str, Pool] = Field(
        default_factory=dict, description="Parameter -> values (each may be absent)."
    )
    headers: dict[str, Pool] = Field(
        default_factory=dict, description="Header -> values (each may be absent)."
    )
    accept: list[str] = Field(
        default_factory=list,
        description="Media ranges an Accept header is composed of (with q values).",
    )
    cookies: dict[str, Pool] = Field(
        default_factory=dict, description="Cookie -> values (each may be absent)."
    )
    form: dict[str, Pool] = Field(default_factory=dict, description="URL-encoded form fields.")
    json_fields: dict[str, Pool] = Field(
        default_factory=dict, description="Fields of a JSON object body."
    )
    content_types: list[str] = Field(
        default_factory=list, description="Content-Type values for bodies."
    )
    raw_bodies: list[str] = Field(
        default_factory=list, description="Literal bodies (e.g. malformed JSON)."
    )
    body_optional: bool = Field(default=True, description="Requests may come without a body.")
    repeat_parameters: bool = Field(
        default=True,
        description="A query or form parameter may occur twice (first-vs-last value semantics).",
    )
    alphabet: str = Field(default=DEFAULT_ALPHABET, description="Characters of free text.")


class ProcessSpace(BaseModel):
    """Where process runs are drawn from: an argv template plus drawn arguments, stdin and files."""

    argv: list[str] = Field(description="Fixed leading argv, e.g. ['{python}', '{root}/cli.py'].")
    args: list[Pool] = Field(
        default_factory=list, description="Positional arguments (each may be absent)."
    )
    options: dict[str, Pool] = Field(default_factory=dict, description="--option -> values.")
    flags: list[str] = Field(default_factory=list, description="Flags that may be present.")
    stdin: Pool = Field(default_factory=Pool)
    files: dict[str, Pool] = Field(default_factory=dict, description="Relative path -> contents.")
    alphabet: str = Field(default=DEFAULT_ALPHABET)


class ApiSpace(BaseModel):
    """Where Python API cases are drawn from: one call with drawn positional/keyword arguments."""

    call: str = Field(description="'module:function'.")
    args: list[Pool] = Field(default_factory=list, description="Positional arguments, in order.")
    kwargs: dict[str, Pool] = Field(
        default_factory=dict, description="Keyword arguments (each may be absent)."
    )
    alphabet: str = Field(default=DEFAULT_ALPHABET)


def _pool(st, pool: Pool, alphabet: str):
    choices = []
    if pool.values:
        choices.append(st.sampled_from(pool.values))
    if pool.free_text or not pool.values:
        choices.append(st.text(alphabet=alphabet, max_size=pool.max_size))
    return st.one_of(*choices)


def _optional_items(st, pools: dict[str, Pool], alphabet: str):
    """A dict with any subset of the keys (shrinks towards none)."""
    parts = {name: st.one_of(st.none(), _pool(st, pool, alphabet)) for name, pool in pools.items()}
    return st.fixed_dictionaries(parts).map(lambda d: {k: v for k, v in d.items() if v is not None})


def _accept(st, media: list[str]):
    quality = st.sampled_from(
        ["", ";q=1", ";q=0.9", ";q=0.5", ";q=0.1", ";q=0", "; q=0.8", ";q=1.0"]
    )
    item = st.tuples(st.sampled_from(media), quality).map("".join)
    separator = st.sampled_from([",", ", "])
    return st.tuples(st.lists(item, min_size=1, max_size=3), separator).map(
        lambda t: t[1].join(t[0])
    )


def _path(st, template: str, alphabet: str):
    pieces = template.split("{")
    out = [st.just(pieces[0])]
    for piece in pieces[1:]:
        name, _, rest = piece.partition("}")
        if name == "int":
            out.append(
                st.one_of(
                    st.integers(0, 20).map(str), st.sampled_from(["007", "-1", "99999999999"])
                )
            )
        else:
            # '/' stays out of drawn segments: an encoded or doubled slash tests the server's
            # path normalization, not the application (search for it with a literal template).
            segment = alphabet.replace("/", "") or "a"
            out.append(
                st.text(alphabet=segment, min_size=1, max_size=6).map(lambda s: quote(s, safe=""))
            )
        out.append(st.just(rest))
    return st.tuples(*out).map("".join)


def _encode_pairs(pairs: list[tuple[str, Any]]) -> str:
    return "&".join(f"{quote(str(k), safe='')}={quote(str(v), safe='')}" for k, v in pairs)


def _repeat(st, space: RequestSpace, pools: dict[str, Pool]):
    """Maybe one more (name, value) pair for a parameter that may then occur twice."""
    if not space.repeat_parameters or not pools:
        return st.none()
    names = sorted(pools)
    pair = st.sampled_from(names).flatmap(
        lambda k: _pool(st, pools[k], space.alphabet).map(lambda v: (k, v))
    )
    return st.one_of(st.none(), pair)


def request_strategy(space: RequestSpace):
    """A strategy of HTTP inputs (the driver's request format) drawn from `space`."""
    from hypothesis import strategies as st

    alphabet = space.alphabet
    paths = (
        st.one_of(*[_path(st, p, alphabet) for p in space.paths]) if space.paths else st.just("/")
    )
    bodies = (
        [st.none()]
        if space.body_optional or not (space.form or space.json_fields or space.raw_bodies)
        else []
    )
    if space.form:
        bodies.append(
            st.tuples(
                _optional_items(st, space.form, alphabet), _repeat(st, space, space.form)
            ).map(lambda t: ("form", _encode_pairs(list(t[0].items()) + ([t[1]] if t[1] else []))))
        )
    if space.json_fields:
        bodies.append(
            _optional_items(st, space.json_fields, alphabet).map(lambda d: ("json", json.dumps(d)))
        )
    if space.raw_bodies:
        bodies.append(st.sampled_from(space.raw_bodies).map(lambda b: ("raw", b)))
    content_types = st.sampled_from(space.content_types) if space.content_types else st.none()
    accept = st.one_of(st.none(), _accept(st, space.accept)) if space.accept else st.none()

    def build(parts) -> dict[str, Any]:
        method, path, (query, repeated), headers, accept_value, cookies, body, content_type = parts
        target = path
        pairs = list(query.items()) + ([repeated] if repeated else [])
        if pairs:
            target += "?" + _encode_pairs(pairs)
        lines = [[k, str(v)] for k, v in headers.items()]
        if accept_value is not None:
            lines.append(["Accept", accept_value])
        if cookies:
            lines.append(["Cookie", "; ".join(f"{k}={v}" for k, v in cookies.items())])
        request: dict[str, Any] = {"method": method, "target": target, "headers": lines}
        if body is not None:
            kind, text = body
            default = {"form": "application/x-www-form-urlencoded", "json": "application/json"}.get(
                kind, "text/plain"
            )
            lines.append(["Content-Type", content_type or default])
            request["body"] = {"text": text}
        return request

    return st.tuples(
        st.sampled_from(space.methods),
        paths,
        st.tuples(_optional_items(st, space.query, alphabet), _repeat(st, space, space.query)),
        _optional_items(st, space.headers, alphabet),
        accept,
        _optional_items(st, space.cookies, alphabet),
        st.one_of(*bodies),
        st.one_of(st.none(), content_types),
    ).map(build)


def process_strategy(space: ProcessSpace):
    """A strategy of process inputs (the driver's run format) drawn from `space`."""
    from hypothesis import strategies as st

    alphabet = space.alphabet
    args = (
        st.tuples(*[st.one_of(st.none(), _pool(st, p, alphabet)) for p in space.args])
        if space.args
        else st.just(())
    )
    flags = (
        st.lists(st.sampled_from(space.flags), unique=True, max_size=len(space.flags))
        if space.flags
        else st.just([])
    )

    def build(parts) -> dict[str, Any]:
        positional, options, chosen_flags, stdin, files = parts
        argv = list(space.argv) + [str(a) for a in positional if a is not None]
        for name, value in options.items():
            argv += [name, str(value)]
        argv += chosen_flags
        return {
            "argv": argv,
            "stdin": {"text": str(stdin)},
            "files": {k: {"text": str(v)} for k, v in files.items()},
            "env": {},
        }

    return st.tuples(
        args,
        _optional_items(st, space.options, alphabet),
        flags,
        _pool(st, space.stdin, alphabet),
        _optional_items(st, space.files, alphabet),
    ).map(build)


def api_strategy(space: ApiSpace):
    """A strategy of Python API inputs (one call) drawn from `space`."""
    from hypothesis import strategies as st

    args = (
        st.tuples(*[_pool(st, p, space.alphabet) for p in space.args])
        if space.args
        else st.just(())
    )
    return st.tuples(args, _optional_items(st, space.kwargs, space.alphabet)).map(
        lambda parts: {"calls": [{"call": space.call, "args": list(parts[0]), "kwargs": parts[1]}]}
    )


def strategy_for(kind: str, space: dict[str, Any]):
    """The strategy of a space given as data (kind: 'http', 'process' or 'python_api')."""
    builders = {
        "http": (RequestSpace, request_strategy),
        "process": (ProcessSpace, process_strategy),
        "python_api": (ApiSpace, api_strategy),
    }
    model, build = builders[kind]
    return build(model.model_validate(space))
