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
- `mount`, `umount2`, `pivot_root`, `move_mount`, `open_tree`, `fsopen`, `fsmount`,
  `fsconfig`, `fspick`, `setns`, and `unshare`/`clone` with `CLONE_NEWUSER`: no
  changing the view of the filesystem and no new user namespace with capabilities.

The `nested` profile keeps the last group allowed: the grader's `test.sh` starts its
own bubblewrap for the candidate (which in turn disables user namespaces inside).
The filter is compiled once per profile with libseccomp (`pyseccomp`) and cached
as a BPF file; bwrap reads it from a file descriptor per command.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

from harness.ground.sandbox import SandboxError

CLONE_NEWUSER = 0x10000000
PROFILES = ("strict", "nested")
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
    target = cache / f"seccomp-{profile}-v2.bpf"
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
    if profile == "strict":
        for name in _STRICT_ONLY:
            _add(flt, deny, name)
        new_user = sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        flt.add_rule(deny, "unshare", new_user)
        flt.add_rule(deny, "clone", new_user)
        _add(flt, sc.ERRNO(errno.ENOSYS), "clone3")  # flags behind a pointer: make libc use clone
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def _add(flt, action, name: str) -> None:
    try:
        flt.add_rule(action, name)
    except (ValueError, RuntimeError, OSError):
        pass  # a system call this architecture does not have


def docker_profile(profile: str) -> str:
    """The same filter as a Docker seccomp profile (JSON, for `--security-opt seccomp=`)."""
    if profile not in PROFILES:
        raise SandboxError(f"unknown seccomp profile {profile!r}")
    names = list(_ALWAYS) + (list(_STRICT_ONLY) if profile == "strict" else [])
    rules: list[dict] = [
        {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
        {"names": ["fallocate"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EOPNOTSUPP},
    ]
    if profile == "strict":
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
