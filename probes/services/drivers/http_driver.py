"""HTTP side of a differential session: starts the service on a loopback port, issues requests.

The service and this client run in the same sandbox (and network namespace), so a
sandbox without a network still has its loopback. Redirects are never followed:
each answer is the raw status, headers and body of one request.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _svc_common import child_env, decode_bytes, encode_bytes, fill, load_config, serve  # noqa: E402


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    """The service under test, started once and kept for the session."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.port = free_port()
        config["port"] = self.port
        self.log_path = os.path.join(config["work"], "server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            fill(config["server"]["argv"], config),
            cwd=fill(config["server"].get("cwd", "{root}"), config),
            env=child_env(config),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            self.wait_ready(float(config["server"].get("startup_s", 20.0)))
        except Exception:
            self.stop()
            raise

    def wait_ready(self, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"service exited with {self.proc.returncode} before listening:\n{self.tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(
            f"service did not listen on port {self.port} within {limit_s}s:\n{self.tail()}"
        )

    def tail(self, limit: int = 4000) -> str:
        self.log.flush()
        with open(self.log_path, "rb") as fh:
            return fh.read()[-limit:].decode("utf-8", "replace")

    def request(self, req: dict) -> dict:
        if self.proc.poll() is not None:
            return {"service_down": True, "exit": self.proc.returncode, "log": self.tail()}
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=float(req.get("timeout_s", 10.0))
        )
        try:
            body = decode_bytes(req.get("body")) if req.get("body") is not None else None
            conn.putrequest(
                req.get("method", "GET"), req.get("target", "/"), skip_accept_encoding=True
            )
            headers = [list(h) for h in req.get("headers", [])]
            if body is not None and not any(h[0].lower() == "content-length" for h in headers):
                headers.append(["Content-Length", str(len(body))])
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            return {
                "status": resp.status,
                "headers": [[k, v] for k, v in resp.getheaders()],
                "body": encode_bytes(data),
            }
        except (OSError, http.client.HTTPException) as exc:
            return {"transport_error": f"{type(exc).__name__}: {exc}", "log": self.tail()}
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def main() -> int:
    config = load_config()
    started: list[Service] = []

    def setup() -> Service:
        started.append(Service(config))
        return started[0]

    try:
        return serve(config, setup, lambda service, req: service.request(req))
    finally:
        for service in started:
            service.stop()


if __name__ == "__main__":
    sys.exit(main())
