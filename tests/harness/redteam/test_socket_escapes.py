"""Sockets the network namespace does not cover, from the Migrator's shell.

An empty network namespace removes every route for the IP families, but not the
families outside it: `AF_VSOCK` talks to the hypervisor of a virtual machine, and
`AF_PACKET`, `AF_ALG` and most netlink protocols are kernel surface no migration
needs. Each test asks for such a socket from inside (by name, and through the raw
system call with garbage in the upper half of the family argument, which the kernel
ignores) and fails if it is granted; a control checks that what tools use still works.
"""

from __future__ import annotations

import platform

import pytest

from tests.conftest import requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.bwrap]

# Prints one line per attempt: "<label> ok" when granted, "<label> <errno>" when refused.
SOCKET_PROBE = r"""
import ctypes, errno, socket, sys
libc = ctypes.CDLL(None, use_errno=True)

def attempt(label, make):
    try:
        make()
        print(label, "ok")
    except OSError as exc:
        print(label, errno.errorcode.get(exc.errno, exc.errno))

def vsock():
    s = socket.socket(40, socket.SOCK_STREAM)
    s.bind((0xFFFFFFFF, 5555))
    s.listen()

def raw(family, kind, proto=0):
    ctypes.set_errno(0)
    fd = libc.syscall(41, ctypes.c_uint64(family), kind, proto)  # socket(2) on x86_64
    if fd < 0:
        raise OSError(ctypes.get_errno(), "refused")

def unix_listen():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0twin-probe")
    s.listen()

def inet_listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    c = socket.create_connection(s.getsockname(), timeout=5)
    c.close()

attempts = {
    "vsock": vsock,
    "vsock-pair": lambda: socket.socketpair(40, socket.SOCK_STREAM),
    "packet": lambda: socket.socket(17, socket.SOCK_RAW, 0x0300),
    "alg": lambda: socket.socket(38, socket.SOCK_SEQPACKET),
    "netlink-diag": lambda: socket.socket(16, socket.SOCK_RAW, 4),
    "netlink-audit": lambda: socket.socket(16, socket.SOCK_RAW, 9),
    "netlink-uevent": lambda: socket.socket(16, socket.SOCK_RAW, 15),
    "can": lambda: socket.socket(29, socket.SOCK_RAW, 1),
    "tipc": lambda: socket.socket(30, socket.SOCK_RDM),
    "beyond-max": lambda: raw(200, 1),
    "vsock-upper-bits": lambda: raw((1 << 32) | 40, 1),
    "packet-upper-bits": lambda: raw((7 << 32) | 17, 3),
    "unix": unix_listen,
    "inet": inet_listen,
    "inet6": lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM),
    "netlink-route": lambda: socket.socket(16, socket.SOCK_RAW, 0),
    "unix-pair": lambda: socket.socketpair(),
    "getaddrinfo": lambda: socket.getaddrinfo("localhost", 80),
}
for label in sys.argv[1:]:
    attempt(label, attempts[label])
"""
REFUSED = [
    "vsock",
    "vsock-pair",
    "packet",
    "alg",
    "netlink-diag",
    "netlink-audit",
    "netlink-uevent",
    "can",
    "tipc",
    "beyond-max",
]
RAW = ["vsock-upper-bits", "packet-upper-bits"]
ALLOWED = ["unix", "inet", "inet6", "netlink-route", "unix-pair", "getaddrinfo"]


def probe(arena, labels: list[str]) -> dict[str, str]:
    arena.sandbox.write_file("/app/socket_probe.py", SOCKET_PROBE)
    result = arena.sandbox.exec(["python", "/app/socket_probe.py", *labels])
    assert result.returncode == 0, result
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_families_outside_the_network_namespace_are_refused(arena):
    seen = probe(arena, REFUSED)
    assert set(seen) == set(REFUSED), seen
    granted = [label for label, outcome in seen.items() if outcome == "ok"]
    assert not granted, seen


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the raw socket(2) number is x86_64's")
def test_garbage_in_the_upper_half_of_the_family_does_not_pass(arena):
    seen = probe(arena, RAW)
    assert all(outcome != "ok" for outcome in seen.values()), seen


def test_what_tools_use_still_works(arena):
    seen = probe(arena, ALLOWED)
    assert seen == dict.fromkeys(ALLOWED, "ok"), seen
    ip = arena.sandbox.exec("command -v ip >/dev/null || { echo no-ip; exit 0; }; ip -o addr show lo")
    assert ip.ok and ("no-ip" in ip.stdout or "127.0.0.1" in ip.stdout), ip
