"""A fake OpenAI-compatible chat server on 127.0.0.1, for tests that go through litellm.

It answers `POST /v1/chat/completions` (and Anthropic's `POST .../messages`, for
`anthropic_tool_use(...)` answers) from a queue of scripted responses and
records every request it received, so a test exercises litellm's real HTTP path
and can assert what was sent::

    from tests.fakes import FakeOpenAIServer, error, text, tool_call

    with FakeOpenAIServer([error(429), text("hello", prompt_tokens=12)]) as server:
        model = make_model(ModelConfig(name="openai/fake", api_base=server.base_url), api_key="sk-fake")
        assert model.query([{"role": "user", "content": "hi"}]).content == "hello"
        assert len(server.requests) == 2

Each scripted response is one of `text(...)`, `tool_call(...)` / `tool_calls(...)`
or `error(status, ...)`, each with an optional `delay_s` before answering (to
provoke client timeouts). When the queue is empty the server answers 400 with
"fake server: no scripted response left", so an unexpected extra call fails
loudly instead of hanging.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    """One scripted answer: a JSON body with a status, after an optional delay."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class RecordedRequest:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


_ids = itertools.count(1)


def _completion(message: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int):
    return {
        "id": f"chatcmpl-fake-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def text(
    content: str, *, prompt_tokens: int = 10, completion_tokens: int = 5, delay_s: float = 0.0
) -> Scripted:
    """An assistant answer with plain text."""
    message = {"role": "assistant", "content": content}
    return Scripted(
        200, _completion(message, "stop", prompt_tokens, completion_tokens), delay_s=delay_s
    )


def tool_calls(
    calls: list[tuple[str, dict[str, Any] | str]] | list[tuple[str, dict[str, Any] | str, str]],
    *,
    content: str | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    delay_s: float = 0.0,
) -> Scripted:
    """An assistant answer calling tools: `(name, arguments[, id])` each.

    Arguments given as a str are sent verbatim (to script invalid JSON).
    """
    wire = []
    for entry in calls:
        name, arguments = entry[0], entry[1]
        call_id = entry[2] if len(entry) > 2 else f"call_{next(_ids)}"
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        wire.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}
        )
    message = {"role": "assistant", "content": content, "tool_calls": wire}
    body = _completion(message, "tool_calls", prompt_tokens, completion_tokens)
    return Scripted(200, body, delay_s=delay_s)


def tool_call(
    name: str, arguments: dict[str, Any] | str, *, id: str | None = None, **kwargs: Any
) -> Scripted:
    """An assistant answer calling one tool."""
    entry = (name, arguments, id) if id else (name, arguments)
    return tool_calls([entry], **kwargs)


def anthropic_tool_use(
    name: str,
    arguments: dict[str, Any],
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
) -> Scripted:
    """An Anthropic Messages API answer (`POST .../messages`) calling one tool, with cache usage."""
    body = {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [{"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": arguments}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": cache_read_input_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens,
        },
    }
    return Scripted(200, body)


def error(
    status: int,
    message: str = "scripted error",
    *,
    headers: dict[str, str] | None = None,
    delay_s: float = 0.0,
) -> Scripted:
    """An HTTP error with an OpenAI-style error body (e.g. 429, 401, 500)."""
    body = {"error": {"message": message, "type": "fake_error", "code": str(status)}}
    return Scripted(status, body, headers=dict(headers or {}), delay_s=delay_s)


class FakeOpenAIServer:
    """Serves scripted chat completions on 127.0.0.1 with an ephemeral port.

    Args:
        responses: the queue, answered in order; more can be added with `push()`.

    Attributes:
        base_url: `http://127.0.0.1:PORT/v1`, for `api_base`.
        requests: every request received, in order (also unanswered ones).
    """

    def __init__(self, responses: list[Scripted] | None = None) -> None:
        self._queue: list[Scripted] = list(responses or [])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def push(self, *responses: Scripted) -> None:
        """Add responses to the end of the queue."""
        with self._lock:
            self._queue.extend(responses)

    @property
    def remaining(self) -> int:
        """Scripted responses not served yet."""
        with self._lock:
            return len(self._queue)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def _next(self, request: RecordedRequest) -> Scripted:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.pop(0)
        return error(400, "fake server: no scripted response left")

    def __enter__(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_unparsable": raw.decode(errors="replace")}
                recorded = RecordedRequest(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                if not self.path.rstrip("/").endswith(("/chat/completions", "/messages")):
                    server.requests.append(recorded)
                    return self._send(error(404, f"fake server: no route {self.path}"))
                self._send(server._next(recorded))

            def _send(self, scripted: Scripted) -> None:
                if server._stop.wait(scripted.delay_s):
                    return
                payload = json.dumps(scripted.body).encode()
                try:
                    self.send_response(scripted.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in scripted.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout); nothing to answer

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
