"""`--model inbox:DIR` against a hostile program that owns DIR and runs as another uid.

twin (root here) writes requests and error files into DIR and reads replies from it.
The program answering is a child process switched to the sandbox uid with setpriv,
and it owns DIR: it plants links at the names twin writes, answers with a FIFO, a
1 GiB sparse file, a link to a root-only file and a tool named `[/]`. None of this
may make twin write through a link, hang past its wait time, read a huge reply into
memory, read a file through a link, or crash: each reply is refused (the documented
second attempt) or the request expires (`expired-<n>.json`, `ModelStopped`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from ground.isolation import SANDBOX_GID, SANDBOX_UID
from ground.model import ModelStopped
from ground.untrusted_io import write_text_atomic
from harness.models.inbox import InboxModel

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to switch uids"
)
VICTIM_TEXT = "ROOT ONLY: twin must never write here\n"
SECRET_REPLY = {"content": "SECRET-ROOT-ONLY-REPLY"}

DRIVER = r"""
import json, os, sys, time
inbox, mode, pid, victim, secret = sys.argv[1:6]
reply = os.path.join(inbox, "reply-1.json")

def plant(name, target=victim):
    path = os.path.join(inbox, name)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)

def wait_for(attempt):
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with open(os.path.join(inbox, "request-1.json")) as fh:
                if json.load(fh)["attempt"] == attempt:
                    return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    sys.exit(f"no request-1.json for attempt {attempt}")

def put(data):
    tmp = os.path.join(inbox, ".reply.writing")
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, reply)

def put_raw(text):
    tmp = os.path.join(inbox, ".reply.writing")
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, reply)

def hostile():
    if mode == "deep":  # arguments, a JSON string, nesting 100,000 arrays
        call = {"id": "a", "function": {"name": "submit", "arguments": "[" * 100000 + "]" * 100000}}
        put({"tool_calls": [call]})
    elif mode == "bigint":  # a 5,000-digit integer (past Python's int-digits limit)
        put_raw('{"content": "x", "usage": {"prompt_tokens": 1' + "0" * 5000 + '}}')
    elif mode == "bigint-arguments":
        put({"tool_calls": [{"id": "a", "function": {"name": "submit", "arguments": '{"n": 1' + "0" * 5000 + '}'}}]})
    elif mode == "typed":  # a tool name that is a list: no dictionary can look it up
        put({"tool_calls": [{"id": "a", "function": {"name": ["submit"], "arguments": "{}"}}]})
    elif mode == "markup":
        put({"tool_calls": [{"id": "a", "function": {"name": "[/]", "arguments": "{}"}}]})
    elif mode == "fifo":
        os.mkfifo(reply)
    elif mode == "sparse":
        with open(reply, "wb") as fh:
            fh.truncate(1 << 30)
    elif mode == "link":
        plant("reply-1.json", secret)
    elif mode == "planted":
        put("not json")

if mode == "planted":  # every name twin writes: its temporary names (predictable before) and its finals
    for stem in ("request-1.json", "error-1.json"):
        plant(f".{stem}.{pid}.tmp")
    plant("error-1.json")
print("ready", flush=True)
wait_for(1)
hostile()
wait_for(2)
if mode == "fifo":
    hostile()
else:
    put({"content": "second attempt"})
"""


@pytest.fixture
def arena():
    """A directory tree only root can write, with an inbox the sandbox uid owns inside it."""
    base = Path(tempfile.mkdtemp(prefix="twin-inbox-redteam-", dir="/tmp"))
    os.chmod(base, 0o711)
    inbox = base / "inbox"
    inbox.mkdir(mode=0o755)
    os.chown(inbox, SANDBOX_UID, SANDBOX_GID)
    victim = base / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    victim.chmod(0o600)
    secret = base / "secret.json"
    secret.write_text(json.dumps(SECRET_REPLY))
    secret.chmod(0o600)
    driver = base / "driver.py"
    driver.write_text(DRIVER)
    driver.chmod(0o644)
    yield base, inbox, victim, secret, driver
    shutil.rmtree(base, ignore_errors=True)


def start_driver(arena, mode: str) -> subprocess.Popen:
    base, inbox, victim, secret, driver = arena
    setpriv = [shutil.which("setpriv"), f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups"]
    proc = subprocess.Popen(
        [*setpriv, "/usr/bin/python3", str(driver), str(inbox), mode, str(os.getpid()), str(victim), str(secret)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def query_in_thread(model: InboxModel, limit_s: float) -> dict:
    """Run one query where a hang cannot hang the test: the result, the exception, or 'hung'."""
    out: dict = {}

    def work():
        try:
            out["reply"] = model.query([{"role": "user", "content": "go"}], TOOLS, role="migrator")
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever ended the query
            out["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(limit_s)
    out["hung"] = worker.is_alive()
    out["elapsed"] = time.monotonic() - started
    return out


TOOLS = [{"type": "function", "function": {"name": "submit", "parameters": {"type": "object", "properties": {}}}}]


def assert_nothing_written_through(inbox: Path, victim: Path) -> None:
    assert victim.read_text() == VICTIM_TEXT
    for name in ("request-1.json", "error-1.json", "expired-1.json"):
        path = inbox / name
        if os.path.lexists(path):
            assert path.is_file() and not path.is_symlink(), name


@pytest.mark.parametrize("mode", ["planted", "markup", "sparse", "link", "deep", "bigint", "bigint-arguments", "typed"])
def test_a_hostile_reply_gets_the_second_attempt_and_no_planted_link_is_written_through(arena, mode):
    base, inbox, victim, _secret, _driver = arena
    model = InboxModel(inbox, wait_s=20)
    driver = start_driver(arena, mode)
    tracemalloc.start()
    try:
        out = query_in_thread(model, 40)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    driver_err = driver.communicate(timeout=30)[1]
    assert not out["hung"], "twin hung on the reply"
    assert "error" not in out, f"{out.get('error')!r}; driver: {driver_err}"
    assert out["reply"].content == "second attempt"
    error = json.loads((inbox / "error-1.json").read_text())
    assert error["retry"] is True and error["attempt"] == 1
    assert "SECRET" not in json.dumps(error) and "SECRET" not in out["reply"].content
    assert peak < 64 << 20, f"{peak} bytes allocated while refusing a reply"
    assert_nothing_written_through(inbox, victim)


def test_a_fifo_reply_never_blocks_twin_past_the_wait_time_and_the_request_expires(arena):
    base, inbox, victim, _secret, _driver = arena
    wait_s = 2.0
    model = InboxModel(inbox, wait_s=wait_s)
    driver = start_driver(arena, "fifo")
    out = query_in_thread(model, 4 * wait_s + 10)
    driver.communicate(timeout=30)
    assert not out["hung"], "twin blocked on a FIFO reply"
    assert isinstance(out.get("error"), ModelStopped), out
    assert out["elapsed"] < 2 * wait_s + 3  # each of the two attempts waits at most wait_s
    assert (inbox / "expired-1.json").is_file() and not (inbox / "request-1.json").exists()
    assert json.loads((inbox / "error-1.json").read_text())["retry"] is False
    assert_nothing_written_through(inbox, victim)


def test_state_files_are_never_written_through_a_link_at_a_temporary_name(tmp_path):
    """`write_text_atomic` (state, config, grades, summary): the old temporary name was `.<name>.<pid>.tmp`."""
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    run = tmp_path / "run"
    run.mkdir()
    (run / f".state.json.{os.getpid()}.tmp").symlink_to(victim)
    (run / "state.json").symlink_to(victim)
    write_text_atomic(run / "state.json", '{"status": "running"}')
    assert victim.read_text() == VICTIM_TEXT
    assert not (run / "state.json").is_symlink() and (run / "state.json").read_text() == '{"status": "running"}'
