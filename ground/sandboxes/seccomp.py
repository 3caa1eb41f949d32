"""The seccomp filter every bubblewrap sandbox loads: kernel interfaces a migration never needs.

Denied with EPERM (ENOSYS for `clone3`, so that libc falls back to `clone`, whose
flags a filter can inspect):

- the kernel keyring (`keyctl`, `add_key`, `request_key`): a key planted by one
  command could otherwise be read by a later one, or by the graded candidate;
- io_uring, BPF, `perf_event_open`, `userfaultfd`: large kernel attack surface;
- `ptrace` and `process_vm_readv`/`writev`: no reading another process's memory;
- `fallocate` (EOPNOTSUPP, so that libc's `posix_fallocate` falls back to writing): blocks
  reserved without being written would reach any disk cap faster than its watcher can look;
  with it refused, a command fills a writable root no faster than it can write;
- sockets of any address family but `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK` with
  `NETLINK_ROUTE` (EAFNOSUPPORT, as for a family the kernel lacks): the network namespace
  empties only the IP families; `AF_VSOCK` reaches the hypervisor of a virtual machine,
  `AF_PACKET`, `AF_ALG`, the other netlink protocols and the rest are kernel surface no
  migration needs (`ip`, `getaddrinfo` and `getifaddrs` use only `NETLINK_ROUTE`). The
  family is compared on its low 32 bits, which is all the kernel reads;
- `mount`, `umount2`, `pivot_root`, `move_mount`, `open_tree`, `fsopen`, `fsmount`,
  `fsconfig`, `fspick`, `setns`, and `unshare`/`clone` with `CLONE_NEWUSER`: no
  changing the view of the filesystem and no new user namespace with capabilities.

The `confined` profile is `strict` that also refuses `memfd_create` (EPERM): a code-confined
sandbox (`Boundary.code_confined`, a role's candidate side beside its /scratch) mounts every
place it can write noexec, and a memory file is the one writable file left that the dynamic
loader could map as code.

The `nested` profile keeps the last group allowed: the grader's `test.sh` starts its
own bubblewrap for the candidate (which in turn disables user namespaces inside).
The filter is compiled once per profile with libseccomp (`pyseccomp`) and cached
as a BPF file; each command's bwrap reads it from a pipe that twin writes once the
command's limits are set (`gate.py`).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

from ground.sandbox import SandboxError

CLONE_NEWUSER = 0x10000000
PROFILES = ("strict", "nested", "confined")
AF_NETLINK = 16
ALLOWED_FAMILIES = frozenset({1, 2, 10, AF_NETLINK})  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
_FAMILY_SPAN = 64  # every family number below this is listed; any value at or above it is refused
_LOW32 = 0xFFFFFFFF
_ALWAYS = (
    "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "perf_event_open", "userfaultfd",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "adjtimex",
)  # fmt: skip
_STRICT_ONLY = (
    "mount", "umount2", "pivot_root", "chroot", "setns",
    "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
)  # fmt: skip


def filter_file(profile: str, cache: Path) -> Path:
    """The compiled BPF program of `profile` (built once into `cache`, then reused).

    Raises:
        SandboxError: libseccomp or its Python binding is missing (the sandbox fails
            closed rather than run without the filter).
    """
    if profile not in PROFILES:
        raise SandboxError(f"unknown seccomp profile {profile!r}")
    target = cache / f"seccomp-{profile}-v3.bpf"
    if target.is_file():
        return target
    program = compile_filter(profile)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".seccomp-", dir=cache)
    with os.fdopen(fd, "wb") as fh:
        fh.write(program)
    os.chmod(tmp, 0o444)
    os.replace(tmp, target)
    return target


def compile_filter(profile: str) -> bytes:
    """The BPF program of `profile` for this machine's architecture."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # OSError: the binding is there, libseccomp.so is not
        raise SandboxError(
            f"the sandbox's seccomp filter needs libseccomp and pyseccomp ({exc}): "
            "apt-get install libseccomp2 && pip install pyseccomp"
        ) from None
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in _ALWAYS:
        _add(flt, deny, name)
    _add(flt, sc.ERRNO(errno.EOPNOTSUPP), "fallocate")
    no_family = sc.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for family in refused_families():
            flt.add_rule(no_family, call, sc.Arg(0, sc.MASKED_EQ, _LOW32, family))
        flt.add_rule(no_family, call, sc.Arg(0, sc.GE, _FAMILY_SPAN))
    # netlink: NETLINK_ROUTE (0) only
    flt.add_rule(no_family, "socket", sc.Arg(0, sc.MASKED_EQ, _LOW32, AF_NETLINK), sc.Arg(2, sc.GE, 1))
    if profile in ("strict", "confined"):
        for name in _STRICT_ONLY:
            _add(flt, deny, name)
        new_user = sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        flt.add_rule(deny, "unshare", new_user)
        flt.add_rule(deny, "clone", new_user)
        _add(flt, sc.ERRNO(errno.ENOSYS), "clone3")  # flags behind a pointer: make libc use clone
    if profile == "confined":
        _add(flt, deny, "memfd_create")
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def refused_families() -> list[int]:
    """The address families below `_FAMILY_SPAN` that `socket` and `socketpair` refuse."""
    return [family for family in range(_FAMILY_SPAN) if family not in ALLOWED_FAMILIES]


def _add(flt, action, name: str) -> None:
    try:
        flt.add_rule(action, name)
    except (ValueError, RuntimeError, OSError):
        pass  # a system call this architecture does not have


def docker_profile(profile: str) -> str:
    """The same filter as a Docker seccomp profile (JSON, for `--security-opt seccomp=`)."""
    if profile not in PROFILES:
        raise SandboxError(f"unknown seccomp profile {profile!r}")
    strict = profile != "nested"
    names = list(_ALWAYS) + (list(_STRICT_ONLY) if strict else []) + (["memfd_create"] if profile == "confined" else [])
    rules: list[dict] = [
        {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
        {"names": ["fallocate"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EOPNOTSUPP},
        *_docker_socket_rules(),
    ]
    if strict:
        new_user = {"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER}
        rules += [
            {
                "names": ["unshare", "clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EPERM,
                "args": [{**new_user, "op": "SCMP_CMP_MASKED_EQ"}],
            },
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        ]
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules})


def _docker_socket_rules() -> list[dict]:
    """The address-family rules of `compile_filter` for `socket`, in Docker's profile syntax (args are ANDed).

    `socketpair` is left to the kernel there (it makes `AF_UNIX` pairs only): the same rules
    on it made the engine's runtime fail to start most containers on this host.
    """
    refuse = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EAFNOSUPPORT}

    def family(value: int) -> dict:
        return {"index": 0, "value": _LOW32, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}

    rules = [{"names": ["socket"], **refuse, "args": [family(f)]} for f in refused_families()]
    rules.append({"names": ["socket"], **refuse, "args": [{"index": 0, "value": _FAMILY_SPAN, "op": "SCMP_CMP_GE"}]})
    netlink_other = {"index": 2, "value": 1, "op": "SCMP_CMP_GE"}
    rules.append({"names": ["socket"], **refuse, "args": [family(AF_NETLINK), netlink_other]})
    return rules
