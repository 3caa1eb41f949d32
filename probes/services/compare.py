"""What counts as the same answer: a declared comparison per probe, recorded with its evidence.

A `Comparison` names what is compared and what is deliberately not (a server's
`Date`, a cookie's absolute `Expires`, a log file's timestamps). It is stored with
every result in full and as a digest, and `loosenings(old, new)` lists what a new
comparison stops checking, so a probe cannot be made to pass by quietly comparing less.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

Observation = dict[str, Any]
SERVER_HEADERS = [
    "date",
    "server",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
]


class ProbeCannotTell(Exception):
    """The observation itself is unusable (the driver failed), so no verdict is possible."""


class Comparison(BaseModel):
    """How two observations of one input are compared; kind-specific fields apply to that kind."""

    kind: Literal["http", "process", "python_api"] = Field(description="The probe kind compared.")
    status: bool = Field(default=True, description="http: compare the status code.")
    ignore_headers: list[str] = Field(
        default_factory=lambda: list(SERVER_HEADERS),
        description="http: header names (any case) never compared; servers add these themselves.",
    )
    only_headers: list[str] | None = Field(
        default=None, description="http: if set, compare only these headers (besides Set-Cookie)."
    )
    cookie_ignore_attributes: list[str] = Field(
        default_factory=lambda: ["expires"],
        description="http: Set-Cookie attributes not compared (Expires is absolute; Max-Age kept).",
    )
    body: Literal["auto", "exact", "json", "ignore"] = Field(
        default="auto",
        description="http: 'auto' compares JSON bodies as parsed JSON, others byte for byte.",
    )
    ignore_json_paths: list[str] = Field(
        default_factory=list,
        description="http/process: dotted JSON paths ('items.*.updated') not compared.",
    )
    exit_status: bool = Field(default=True, description="process: compare the exit status.")
    stdout: Literal["exact", "json", "ignore"] = Field(
        default="exact", description="process: stdout mode."
    )
    stderr: Literal["exact", "ignore"] = Field(default="exact", description="process: stderr mode.")
    files: bool = Field(default=True, description="process: compare files written and removed.")
    ignore_files: list[str] = Field(
        default_factory=list, description="process: glob patterns not compared."
    )
    values: bool = Field(
        default=True, description="python_api: compare returned values (exactly, types kept)."
    )
    exception_types: bool = Field(
        default=True, description="python_api: compare raised exception types."
    )
    exception_messages: bool = Field(
        default=False, description="python_api: compare exception messages too."
    )

    def digest(self) -> str:
        """A stable hash of the comparison, stored with every result that used it."""
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()[
            :16
        ]


def loosenings(old: Comparison, new: Comparison) -> list[str]:
    """What `new` no longer compares that `old` did (empty when `new` is as strict or stricter)."""
    found = []
    for name in (
        "status",
        "exit_status",
        "files",
        "values",
        "exception_types",
        "exception_messages",
    ):
        if getattr(old, name) and not getattr(new, name):
            found.append(f"{name} no longer compared")
    for name in ("ignore_headers", "cookie_ignore_attributes", "ignore_json_paths", "ignore_files"):
        added = {v.lower() for v in getattr(new, name)} - {v.lower() for v in getattr(old, name)}
        if added:
            found.append(f"{name} adds {', '.join(sorted(added))}")
    if new.only_headers is not None and (
        old.only_headers is None or set(new.only_headers) < set(old.only_headers)
    ):
        found.append("only_headers narrows the headers compared")
    for name, strict in (
        ("body", ("exact", "json", "auto")),
        ("stdout", ("exact", "json")),
        ("stderr", ("exact",)),
    ):
        if getattr(old, name) in strict and getattr(new, name) == "ignore":
            found.append(f"{name} no longer compared")
    return found


def differences(
    comparison: Comparison, reference: Observation, candidate: Observation
) -> list[str]:
    """Human-readable differences between two observations (empty: the same under `comparison`).

    Raises:
        ProbeCannotTell: a driver failed on either side (not a verdict on the candidate).
    """
    for side, obs in (("reference", reference), ("candidate", candidate)):
        if "driver_error" in obs:
            raise ProbeCannotTell(f"{side} driver failed: {obs['driver_error'][-1500:]}")
    if comparison.kind == "http":
        return _http(comparison, reference, candidate)
    if comparison.kind == "process":
        return _process(comparison, reference, candidate)
    return _python_api(comparison, reference, candidate)


# ---- HTTP ---------------------------------------------------------------------------------------
def _http(cmp: Comparison, ref: Observation, cand: Observation) -> list[str]:
    for key in ("transport_error", "service_down"):
        if key in ref:
            raise ProbeCannotTell(
                f"the original failed to answer ({key}): {str(ref.get(key))[:300]}"
            )
        if key in cand:
            return [f"candidate did not answer ({key}): {str(cand.get(key))[:300]}"]
    diffs = []
    if cmp.status and ref["status"] != cand["status"]:
        diffs.append(f"status: {ref['status']} != {cand['status']}")
    ref_h, cand_h = _headers(ref), _headers(cand)
    ignored = {h.lower() for h in cmp.ignore_headers} | {"set-cookie"}
    names = sorted(set(ref_h) | set(cand_h))
    if cmp.only_headers is not None:
        names = [n for n in names if n in {h.lower() for h in cmp.only_headers}]
    for name in names:
        if name not in ignored and ref_h.get(name) != cand_h.get(name):
            diffs.append(f"header {name}: {ref_h.get(name)} != {cand_h.get(name)}")
    if "set-cookie" not in {h.lower() for h in cmp.ignore_headers}:
        drop = {a.lower() for a in cmp.cookie_ignore_attributes}
        ref_c = _cookies(ref_h.get("set-cookie", []), drop)
        cand_c = _cookies(cand_h.get("set-cookie", []), drop)
        if ref_c != cand_c:
            diffs.append(f"set-cookie: {ref_c} != {cand_c}")
    diffs += _body(cmp, ref, cand, ref_h.get("content-type", [""])[0])
    return diffs


def _headers(obs: Observation) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in obs.get("headers", []):
        grouped.setdefault(name.lower(), []).append(value)
    return grouped


def _cookies(values: list[str], drop: set[str]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Set-Cookie values as (name, value, sorted attributes); attribute names ignore case."""
    parsed = []
    for raw in values:
        first, *attrs = raw.split(";")
        name, _, value = first.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        kept = []
        for attr in attrs:
            key, _, val = attr.strip().partition("=")
            if key and key.lower() not in drop:
                kept.append(
                    (key.lower(), val.strip().lower() if key.lower() == "samesite" else val.strip())
                )
        parsed.append((name.strip(), value, sorted(kept)))
    return sorted(parsed)


def _raw(body: Any) -> bytes:
    if body is None:
        return b""
    if "base64" in body:
        return base64.b64decode(body["base64"])
    return body.get("text", "").encode()


def _body(cmp: Comparison, ref: Observation, cand: Observation, content_type: str) -> list[str]:
    if cmp.body == "ignore":
        return []
    ref_b, cand_b = _raw(ref.get("body")), _raw(cand.get("body"))
    kind = cmp.body
    if kind == "auto":
        media = content_type.split(";")[0].strip().lower()
        kind = "json" if media == "application/json" or media.endswith("+json") else "exact"
    if kind == "json":
        try:
            ref_j = _drop_paths(json.loads(ref_b), cmp.ignore_json_paths)
        except ValueError:
            ref_j = None
        if ref_j is not None:
            try:
                cand_j = _drop_paths(json.loads(cand_b), cmp.ignore_json_paths)
            except ValueError:
                return [f"body: JSON expected, candidate sent {cand_b[:200]!r}"]
            return [] if ref_j == cand_j else [f"body (JSON): {_short(ref_j)} != {_short(cand_j)}"]
    return [] if ref_b == cand_b else [f"body: {ref_b[:200]!r} != {cand_b[:200]!r}"]


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def _drop_paths(value: Any, paths: list[str]) -> Any:
    for path in paths:
        value = _drop(value, path.split("."))
    return value


def _drop(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head]
        out = dict(value)
        for key in keys:
            if key in out:
                if rest:
                    out[key] = _drop(out[key], rest)
                else:
                    del out[key]
        return out
    if isinstance(value, list) and (head == "*" or head.isdigit()):
        indices = range(len(value)) if head == "*" else [int(head)]
        out_list = list(value)
        for i in indices:
            if i < len(out_list) and rest:
                out_list[i] = _drop(out_list[i], rest)
        return out_list
    return value


# ---- processes ----------------------------------------------------------------------------------
def _process(cmp: Comparison, ref: Observation, cand: Observation) -> list[str]:
    diffs = []
    if ref.get("spawn_error"):
        raise ProbeCannotTell(f"the original could not be started: {ref['spawn_error']}")
    if cmp.exit_status and (ref.get("exit"), ref.get("timed_out")) != (
        cand.get("exit"),
        cand.get("timed_out"),
    ):
        diffs.append(
            f"exit: {ref.get('exit')} != {cand.get('exit')}"
            + (" (timed out)" if cand.get("timed_out") else "")
        )
    if cmp.stdout != "ignore":
        ref_out, cand_out = _raw(ref.get("stdout")), _raw(cand.get("stdout"))
        if cmp.stdout == "json":
            try:
                same = _drop_paths(json.loads(ref_out), cmp.ignore_json_paths) == _drop_paths(
                    json.loads(cand_out), cmp.ignore_json_paths
                )
            except ValueError:
                same = ref_out == cand_out
        else:
            same = ref_out == cand_out
        if not same:
            diffs.append(f"stdout: {ref_out[:200]!r} != {cand_out[:200]!r}")
    if cmp.stderr == "exact" and _raw(ref.get("stderr")) != _raw(cand.get("stderr")):
        diffs.append(
            f"stderr: {_raw(ref.get('stderr'))[:200]!r} != {_raw(cand.get('stderr'))[:200]!r}"
        )
    if cmp.files:

        def kept(names):
            return {n for n in names if not any(fnmatch.fnmatch(n, p) for p in cmp.ignore_files)}

        ref_f, cand_f = ref.get("files", {}), cand.get("files", {})
        for name in sorted(kept(ref_f) | kept(cand_f)):
            if name not in cand_f:
                diffs.append(f"file {name}: written by the original, not by the candidate")
            elif name not in ref_f:
                diffs.append(f"file {name}: written (or left behind) by the candidate only")
            elif _raw(ref_f[name]) != _raw(cand_f[name]):
                diffs.append(
                    f"file {name}: {_raw(ref_f[name])[:120]!r} != {_raw(cand_f[name])[:120]!r}"
                )
        ref_rm, cand_rm = kept(ref.get("removed", [])), kept(cand.get("removed", []))
        if ref_rm != cand_rm:
            diffs.append(f"removed files: {sorted(ref_rm)} != {sorted(cand_rm)}")
    return diffs


# ---- Python API ---------------------------------------------------------------------------------
def _python_api(cmp: Comparison, ref: Observation, cand: Observation) -> list[str]:
    if ref.get("crashed"):
        raise ProbeCannotTell("the original crashed the interpreter on this input")
    if cand.get("crashed"):
        return ["candidate crashed the interpreter"]
    diffs = []
    for i, (r, c) in enumerate(zip(ref["calls"], cand["calls"], strict=True)):
        if "raised" in r or "raised" in c:
            if cmp.exception_types and r.get("raised") != c.get("raised"):
                got = (
                    f"raised {c['raised']}"
                    if "raised" in c
                    else f"returned {_short(c.get('value'))}"
                )
                want = (
                    f"raised {r['raised']}"
                    if "raised" in r
                    else f"returned {_short(r.get('value'))}"
                )
                diffs.append(f"call {i}: {want} != {got}")
            elif cmp.exception_messages and r.get("message") != c.get("message"):
                diffs.append(f"call {i}: message {r.get('message')!r} != {c.get('message')!r}")
        elif cmp.values and r["value"] != c["value"]:
            diffs.append(f"call {i}: {_short(r['value'])} != {_short(c['value'])}")
    return diffs
