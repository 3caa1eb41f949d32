"""HTTP differential probes: both services on loopback ports inside their sandboxes, same requests.

The client runs next to each service (same sandbox, same network namespace), so
sandboxes without a network still work. Requests are raw: redirects are not
followed, so a redirect's status, `Location` and cookies are compared as they are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from probes.services.compare import Comparison
from probes.services.matched import Probe, matched_probe


class HttpRequest(BaseModel):
    """One request, sent identically to both services."""

    method: str = Field(default="GET", description="HTTP method.")
    target: str = Field(default="/", description="Path and query, e.g. '/books?q=a'.")
    headers: list[tuple[str, str]] = Field(
        default_factory=list, description="Header lines, in order."
    )
    body: str | None = Field(default=None, description="Request body (UTF-8 text).")

    def as_input(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "method": self.method,
            "target": self.target,
            "headers": [list(h) for h in self.headers],
        }
        if self.body is not None:
            data["body"] = {"text": self.body}
        return data


def service_sides(
    reference_argv: list[str], candidate_argv: list[str], *, startup_s: float = 30.0
) -> dict[str, Any]:
    """Driver settings starting each side's service; argv may use `{python}`, `{port}`, `{root}`."""
    return {
        "reference": {"server": {"argv": reference_argv, "cwd": "{root}", "startup_s": startup_s}},
        "candidate": {"server": {"argv": candidate_argv, "cwd": "{root}", "startup_s": startup_s}},
    }


def http_probe(
    sides: dict[str, Any],
    requests: dict[str, HttpRequest | dict[str, Any]],
    comparison: dict[str, Any] | Comparison | None = None,
    **options: Any,
) -> Probe:
    """A probe sending each named request to both services and comparing the answers.

    Args:
        sides: from `service_sides(...)`.
        requests: case name -> request.
        comparison: fields of an HTTP `Comparison` (defaults ignore only Date, Server,
            Content-Length, Connection and cookie Expires).
    """
    cases = [
        {
            "name": name,
            "input": (HttpRequest.model_validate(r) if isinstance(r, dict) else r).as_input(),
        }
        for name, r in requests.items()
    ]
    return matched_probe("http", sides, cases, comparison, **options)
