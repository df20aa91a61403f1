"""``monta doctor``: is this machine able to run the emulated cluster? One line per need.

The emulator builds one user + network namespace per run (util-linux ``unshare``/``nsenter``),
veths, a bridge and htb qdiscs inside it (iproute2 ``ip``/``tc``), and runs ranks with the CPU
build of torch and DeepSpeed's JIT-built CPU comm op. A missing piece otherwise shows up minutes
into a first run, as a rank's traceback; here each one is checked in about a second, and a failed
check says what to do. Exit 1 when the emulator cannot run, else 0 (warnings do not count).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata

OK, WARN, FAIL = "ok", "warn", "FAIL"
PINNED_TORCH = "2.13.0"  # the Makefile's pin (make setup); other versions may work, are not tested
# What the emulator runs inside its namespace, in miniature: a bridge, and an htb qdisc with a class.
# sch_htb cannot be auto-loaded from inside a user namespace, so this also catches a kernel without it.
_NAMESPACE_PROBE = (
    "ip link set lo up && ip link add monta-doctor type bridge && "
    "tc qdisc add dev lo root handle 1: htb default 1 && "
    "tc class add dev lo parent 1: classid 1:1 htb rate 1gbit"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK | WARN | FAIL
    detail: str  # what was found; for WARN/FAIL also what to do (a FAIL: the emulator cannot run)

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<18} {self.detail}"


def check_python() -> Check:
    v = sys.version_info
    found = f"{v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if v < (3, 10):
        return Check("python", FAIL, f"{found}: monta needs >= 3.10; make setup PYTHON=python3.11")
    if (v.major, v.minor) != (3, 11):
        return Check("python", WARN, f"{found}: the pins in requirements.lock are tested on 3.11")
    return Check("python", OK, found)


def check_tools(path: str | None = None) -> list[Check]:
    """The commands the emulator runs, looked up on ``path`` (default: $PATH)."""
    packages = {"unshare": "util-linux", "nsenter": "util-linux", "ip": "iproute2", "tc": "iproute2"}
    out = []
    for tool, package in packages.items():
        where = shutil.which(tool, path=path)
        if where:
            out.append(Check(tool, OK, where))
        else:
            out.append(Check(tool, FAIL, f"not found on PATH: install {package} (apt-get install {package})"))
    return out


def check_namespaces(path: str | None = None) -> Check:
    """Make a user + network namespace as the emulator does and build a bridge and an htb class in it."""
    from monta.emulate.launcher import UNSHARE  # torch-free module; the exact flags the emulator uses

    if shutil.which("unshare", path=path) is None:
        return Check("user namespaces", FAIL, "cannot try: unshare not found (install util-linux)")
    env = dict(os.environ, PATH=path) if path is not None else None
    try:
        proc = subprocess.run(
            UNSHARE + ["sh", "-c", _NAMESPACE_PROBE], capture_output=True, text=True, timeout=30, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("user namespaces", FAIL, f"{' '.join(UNSHARE[:4])} did not run ({e})")
    if proc.returncode == 0:
        return Check("user namespaces", OK, "user + network namespace, bridge and htb qdisc made and removed")
    why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    if "unshare" in why or "Operation not permitted" in why:
        fix = (
            "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces=15000, kernel.apparmor_restrict_unprivileged_userns=0; in a "
            "container: --security-opt seccomp=unconfined), or run benchmarks with --allow-unshaped (no shaping)"
        )
    else:
        fix = "ip/tc failed inside the namespace: update iproute2, or load the kernel module sch_htb (modprobe sch_htb)"
    return Check("user namespaces", FAIL, f"{why}: {fix}")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_torch() -> Check:
    version = _version("torch")
    if version is None:
        return Check("torch", FAIL, "not installed: make setup (installs the CPU build of torch)")
    base, _, local = version.partition("+")
    pin = "" if base == PINNED_TORCH else f"; make setup pins {PINNED_TORCH}"
    if local == "cpu":
        return Check("torch", WARN if pin else OK, f"{version}, CPU build{pin}")
    import torch  # no local label: only the module knows whether it was built for CUDA

    if torch.version.cuda:
        return Check(
            "torch",
            WARN,
            f"{version}, CUDA {torch.version.cuda} build: fine on GPU nodes; for the emulator alone the CPU "
            "build is enough: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
        )
    return Check("torch", WARN if pin else OK, f"{version}, CPU build{pin}")


def check_deepspeed_op() -> Check:
    """DeepSpeed installed and its CPU comm op built into this environment's build folder."""
    from monta import extensions

    version = _version("deepspeed")
    if version is None:
        return Check("deepspeed CPU op", FAIL, "deepspeed not installed: make setup")
    env = dict(os.environ)
    extensions.configure(env)
    root = extensions.build_root(env)
    built = sorted(root.glob("deepspeed_shm_comm*/*.so")) + sorted(root.glob("*/deepspeed_shm_comm*/*.so"))
    if built:
        return Check("deepspeed CPU op", OK, f"deepspeed {version}, op built: {built[0]}")
    return Check(
        "deepspeed CPU op",
        WARN,
        f"deepspeed {version}, op not built in {root}: python -m monta.extensions --build (~45 s; "
        "else the first rank builds it)",
    )


def run_checks(path: str | None = None) -> list[Check]:
    return [check_python(), *check_tools(path), check_namespaces(path), check_torch(), check_deepspeed_op()]


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine can run the emulated cluster (namespaces, ip/tc, torch)",
        description=__doc__.splitlines()[0],
    )
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    checks = run_checks()
    for c in checks:
        print(c.line())
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        print(f"monta doctor: the emulator cannot run here ({', '.join(failed)}); fix the FAIL lines above")
        return 1
    print("monta doctor: this machine can run the emulated cluster")
    return 0
