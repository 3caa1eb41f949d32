"""A differential session: one long-lived driver per side, the same inputs to both.

Each side's driver runs through that side's sandbox (`ProbeContext.sandbox(side)`),
so the reference side sees the original with its framework and the candidate side
sees the candidate with the forbidden packages absent and no network. The driver
is started once (for an HTTP probe: the service starts once) and then answers one
input at a time over two FIFOs in the probe work directory, which both sides
mount. That keeps a counterexample search at two round trips per input instead of
two service starts.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ground.agent_tree import discard_tree
from ground.errors import TwinError

DRIVERS = Path(__file__).resolve().parent / "drivers"
DRIVER_FILES = {
    "http": "http_driver.py",
    "process": "process_driver.py",
    "python_api": "api_driver.py",
}
SIDES = ("reference", "candidate")


class SessionError(TwinError):
    """A side's driver could not be started or stopped answering.

    Attributes:
        side: the side that failed to start ('candidate' after the reference started
            fine: the candidate's own failure), or None when it failed later.
    """

    def __init__(self, message: str, side: str | None = None) -> None:
        super().__init__(message)
        self.side = side


@dataclass
class SideDriver:
    """One side's driver process, reached through its FIFOs."""

    side: str
    host_dir: Path
    thread: threading.Thread
    result: dict[str, Any] = field(default_factory=dict)
    reader: Any = None
    writer: Any = None
    buffer: bytes = b""

    def alive(self) -> bool:
        return self.thread.is_alive()

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write((json.dumps(message) + "\n").encode())
        self.writer.flush()

    def receive(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SessionError(
                    f"{self.side} driver gave no answer within {timeout_s:.0f}s{self.tail()}"
                )
            ready, _, _ = select.select([self.reader], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self.reader.fileno(), 1 << 16)
                if not chunk:
                    self.thread.join(timeout=5)
                    raise SessionError(f"{self.side} driver exited{self.tail()}")
                self.buffer += chunk
            elif not self.alive():
                raise SessionError(f"{self.side} driver exited{self.tail()}")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def tail(self) -> str:
        res = self.result.get("exec")
        if res is None:
            return ""
        return f" (exit {res.returncode}): {(res.stderr or res.stdout)[-2000:]}"


class DifferentialSession:
    """Sends the same inputs to the original and the candidate and returns both observations.

    Args:
        ctx: the probe context (`probes.context.ProbeContext`).
        kind: 'http', 'process' or 'python_api'.
        sides: per side, the driver settings (for HTTP: `{"server": {"argv": [...], "cwd": ...}}`;
            for a Python API probe: `{"preload": [...]}`); `{python}` and `{root}` are filled in.
        timeout_s: how long one input may take on one side.
        startup_s: how long a side may take to become ready.
        lifetime_s: how long the drivers may live in all (default: the context's timeout);
            a search holds its session for its whole budget.

    Use as a context manager; `observe(input)` returns `(reference, candidate)`.

    Raises:
        SessionError: a side could not start (its log tail is in the message).
    """

    def __init__(
        self,
        ctx,
        kind: str,
        sides: dict[str, dict[str, Any]],
        *,
        timeout_s: float = 30.0,
        startup_s: float = 60.0,
        lifetime_s: float | None = None,
    ) -> None:
        if kind not in DRIVER_FILES:
            raise SessionError(f"unknown session kind {kind!r}; known: {', '.join(DRIVER_FILES)}")
        missing = [s for s in SIDES if s not in sides]
        if missing:
            raise SessionError(f"{kind} session: no settings for side(s) {', '.join(missing)}")
        self.ctx, self.kind, self.sides = ctx, kind, sides
        self.timeout_s, self.startup_s = timeout_s, startup_s
        self.lifetime_s = max(lifetime_s or 0.0, float(ctx.timeout_s))
        self.drivers: dict[str, SideDriver] = {}
        self.started: dict[str, float] = {}

    def __enter__(self) -> DifferentialSession:
        try:
            for side in SIDES:
                self.drivers[side] = self._start(side)
            for side in SIDES:
                self._handshake(self.drivers[side])
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- starting a side ----------------------------------------------------------------------
    def _start(self, side: str) -> SideDriver:
        # the side's own work directory: the other side never sees this session's files
        host_dir = self.ctx.side_work(side) / f"session-{self.kind}-{uuid.uuid4().hex[:8]}"
        host_dir.mkdir(parents=True)
        for name in ("_svc_common.py", DRIVER_FILES[self.kind]):
            shutil.copy2(DRIVERS / name, host_dir / name)
        os.mkfifo(host_dir / "in")
        os.mkfifo(host_dir / "out")
        inside = self.ctx.inside(side, host_dir)
        roots = self.ctx.roots(side)
        root = roots["source"] if side == "reference" else roots["candidate"]
        config = {
            **self.sides[side],
            "side": side,
            "root": root,
            "work": inside,
            "fifo_in": f"{inside}/in",
            "fifo_out": f"{inside}/out",
            "python": sys.executable,
            "forbidden": self.ctx.forbidden(side)
            if self.ctx.resolved_sandbox_kind == "none"
            else [],
            "env": {**self.ctx.side_env(), **self.sides[side].get("env", {})},
        }
        (host_dir / "config.json").write_text(json.dumps(config, indent=1))
        argv = [sys.executable, f"{inside}/{DRIVER_FILES[self.kind]}", f"{inside}/config.json"]
        sandbox = self.ctx.sandbox(side)
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["exec"] = sandbox.exec(argv, cwd=root, timeout_s=self.lifetime_s)
            except Exception as exc:  # reported by the handshake
                result["error"] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=run, name=f"twin-{self.kind}-{side}", daemon=True)
        thread.start()
        return SideDriver(side=side, host_dir=host_dir, thread=thread, result=result)

    def _handshake(self, driver: SideDriver) -> None:
        deadline = time.monotonic() + self.startup_s
        driver.reader = os.fdopen(
            os.open(driver.host_dir / "out", os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0
        )
        while driver.writer is None:
            try:
                fd = os.open(driver.host_dir / "in", os.O_WRONLY | os.O_NONBLOCK)
                os.set_blocking(fd, True)
                driver.writer = os.fdopen(fd, "wb")
            except OSError:
                if not driver.alive() or time.monotonic() > deadline:
                    error = driver.result.get("error") or driver.tail() or " (no output)"
                    raise SessionError(
                        f"{driver.side} side of the {self.kind} probe did not start: {error}",
                        side=driver.side,
                    ) from None
                time.sleep(0.02)
        hello = driver.receive(max(1.0, deadline - time.monotonic()))
        if "startup_error" in hello:
            raise SessionError(
                f"{driver.side} side of the {self.kind} probe did not start: "
                f"{hello['startup_error'][-2000:]}",
                side=driver.side,
            )
        self.started[driver.side] = time.monotonic()

    # ---- using it -----------------------------------------------------------------------------
    def observe_side(self, side: str, value: Any) -> dict[str, Any]:
        driver = self.drivers[side]
        driver.send({"input": value})
        return driver.receive(self.timeout_s)

    def observe(self, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The reference's and the candidate's observation of one input."""
        return self.observe_side("reference", value), self.observe_side("candidate", value)

    def close(self) -> None:
        for driver in self.drivers.values():
            try:
                if driver.writer is not None:
                    driver.send({"op": "quit"})
                    driver.writer.close()
            except OSError:
                pass
            driver.thread.join(timeout=10)
            if driver.reader is not None:
                driver.reader.close()
            discard_tree(driver.host_dir)
        self.drivers.clear()
