"""Least privilege for emulated ranks: no capabilities once the network is set up.

The emulator's supervisor is root of its own user namespace (``unshare --map-root-user``) because
building namespaces, veths and qdiscs needs CAP_NET_ADMIN / CAP_SYS_ADMIN there. A rank needs none
of that, and with those capabilities it would override permission bits on every file of the user
mapped to that root (CAP_DAC_OVERRIDE): a results folder its owner made read-only (chmod 555) was
written into. So each rank, after joining its node's namespaces and before exec, clears every
capability set (effective, permitted, inheritable, ambient, bounding), locks the securebits so
that exec as uid 0 grants none back (SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP) and sets no_new_privs.
The rank then is the user, file permissions and all, exactly as outside the emulator.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECBIT_NOROOT = 1 << 0
SECBIT_NOROOT_LOCKED = 1 << 1
SECBIT_NO_SETUID_FIXUP = 1 << 2
SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 3
SECBIT_KEEP_CAPS_LOCKED = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE = 1 << 6
SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 7
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "ppc64le": 184, "s390x": 185}

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot drop the rank's privileges ({what}): {os.strerror(err)}")


def _last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def drop_capabilities() -> None:
    """Clear every capability of this process for good (see the module docstring). For a
    preexec_fn: raises OSError when the kernel refuses, and the rank is then not started."""
    bits = (
        SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
    )
    _check(_libc.prctl(PR_SET_SECUREBITS, ctypes.c_ulong(bits), 0, 0, 0), "securebits")
    for cap in range(_last_cap() + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0), f"bounding set, capability {cap}")
    _check(_libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0), "ambient set")
    nr = _SYS_CAPSET.get(platform.machine())
    if nr is None:
        raise OSError(0, f"cannot drop the rank's privileges: capset is not known on {platform.machine()}")
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(ctypes.c_long(nr), ctypes.byref(hdr), ctypes.byref(data)), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0), "no_new_privs")


def capabilities(pid: int | str = "self") -> dict[str, int]:
    """CapInh/CapPrm/CapEff/CapBnd/CapAmb of a process, from /proc/PID/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            out[key] = int(value.strip(), 16)
    return out
