"""`monta doctor`: one line per need of the emulator, a fix on each failed line, exit 1 when it cannot run."""

import subprocess
import sys
from pathlib import Path

from monta import doctor

MONTA = str(Path(sys.executable).parent / "monta")


def test_this_machine_passes_every_check_the_emulator_needs():
    # The test suite runs the emulator on this machine, so every need must be met here.
    proc = subprocess.run([MONTA, "doctor"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    names = ["python", "unshare", "nsenter", "ip", "tc", "user namespaces", "torch", "deepspeed CPU op"]
    assert [line[6:24].strip() for line in lines[:-1]] == names
    assert not any(line.startswith("FAIL") for line in lines)
    assert lines[-1] == "monta doctor: this machine can run the emulated cluster"


def test_missing_tools_fail_with_the_package_to_install(tmp_path):
    # An empty PATH is a machine without util-linux and iproute2: each tool fails naming its package.
    checks = {c.name: c for c in doctor.check_tools(path=str(tmp_path))}
    assert {n: c.status for n, c in checks.items()} == dict.fromkeys(["unshare", "nsenter", "ip", "tc"], "FAIL")
    assert "util-linux" in checks["unshare"].detail and "iproute2" in checks["tc"].detail
    ns = doctor.check_namespaces(path=str(tmp_path))
    assert ns.status == "FAIL" and "util-linux" in ns.detail


def test_command_exits_nonzero_and_names_the_failed_checks(tmp_path):
    proc = subprocess.run(
        [MONTA, "doctor"], capture_output=True, text=True, timeout=120, env={"PATH": str(tmp_path), "HOME": "/tmp"}
    )
    assert proc.returncode == 1
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert [f.split()[1] for f in fails] == ["unshare", "nsenter", "ip", "tc", "user"]
    assert all(": " in f or "install" in f for f in fails)  # each says what to do
    assert proc.stdout.splitlines()[-1].startswith("monta doctor: the emulator cannot run here (unshare, nsenter")


def test_python_and_torch_checks_describe_this_environment():
    py = doctor.check_python()
    assert py.status == "ok" and sys.executable in py.detail
    torch = doctor.check_torch()
    assert torch.status == "ok" and torch.detail.startswith("2.13.0+cpu, CPU build")
