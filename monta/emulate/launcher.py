"""Runs a command once per rank on an emulated N-node cluster and returns every rank's exit code.

Host side of the emulator: everything it starts lives in one ``unshare`` process tree with its own user, network
and PID namespaces, so killing that tree removes every namespace, qdisc and rank.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from monta.emulate.launch_spec import LaunchSpec
from monta.emulate.ranks import RankInfo
from monta.emulate.topology import Topology

UNSHARE = [
    "unshare",
    "--user",
    "--map-root-user",
    "--net",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount",
    "--mount-proc",
]
RANK_THREADS_ENV = "MONTA_RANK_THREADS"  # compute threads per emulated rank (default 1)
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
_PR_SET_PDEATHSIG = 1
_GRACE_S = 10.0  # beyond timeout_s, before the launcher kills the whole tree itself
_TAIL_LINES = 15
_CRASH_FRAMES = 6  # innermost frames of a crashed rank's thread shown in the error


class EmulationError(RuntimeError):
    """The emulated run could not start or did not finish cleanly (message says what to change)."""


class NamespaceUnavailable(EmulationError):
    """This kernel (or its policy) forbids the user + network namespaces the emulator needs."""


class RankFailed(EmulationError):
    """A rank exited non-zero or by a signal; all other ranks were killed."""

    def __init__(self, message: str, result: LaunchResult):
        super().__init__(message)
        self.result = result


@dataclass
class LaunchResult:
    returncodes: list[int | None]  # per rank; negative = killed by that signal
    ranks: list[RankInfo]
    log_dir: Path  # rank{r}.log per rank (rank 0: stderr only; its stdout is in .stdout)
    stdout: str  # rank 0's standard output, as streamed to the caller
    emulated: bool  # False in the allow_unshaped 127.0.0.1 fallback
    failure: dict[str, Any] | None = None
    links: dict[str, Any] = field(default_factory=dict)  # per node: eth0/lo tx/rx bytes at the end
    setup_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and all(c == 0 for c in self.returncodes)


# -- namespace availability ------------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def namespace_problem() -> str | None:
    """None if user + network namespaces and ip/tc work here, else a one-line reason."""
    for tool in ("unshare", "nsenter", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found: install util-linux and iproute2 to emulate a cluster"
    proc = subprocess.run(UNSHARE + ["true"], capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    hints = []
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        hints.append("sysctl kernel.unprivileged_userns_clone=1")
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        hints.append("sysctl user.max_user_namespaces=15000")
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        hints.append("sysctl kernel.apparmor_restrict_unprivileged_userns=0")
    if not hints:
        hints.append(
            "check sysctls kernel.unprivileged_userns_clone and user.max_user_namespaces, and seccomp/container policy"
        )
    return (
        f"user namespaces are unavailable ({' '.join(UNSHARE[:4])} failed: {proc.stderr.strip() or proc.returncode}); "
        f"enable them with {' / '.join(hints)}, or pass allow_unshaped=True (--allow-unshaped) "
        "to run all ranks on 127.0.0.1 without shaping"
    )


# -- launching -------------------------------------------------------------------------------
def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    """The end of a rank's log; for a rank that died of a fatal signal, faulthandler's report instead
    (the supervisor sets PYTHONFAULTHANDLER): the lines printed just before it (e.g. a C++
    "terminate called ..."), the error, and the innermost frames of the thread that crashed."""
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    crash = next((i for i, line in enumerate(text) if line.startswith("Fatal Python error:")), None)
    if crash is None:
        return "\n".join("    " + line for line in text[-lines:])
    shown = [line for line in text[max(0, crash - 3) : crash + 1] if line.strip()]
    current = next((i for i in range(crash, len(text)) if text[i].startswith("Current thread")), None)
    if current is not None:
        frames = itertools.takewhile(lambda line: line.startswith("  File "), text[current + 1 :])
        shown += [text[current], *itertools.islice(frames, _CRASH_FRAMES)]
    return "\n".join("    " + line for line in shown)


def _validate(argv: Sequence[str], nodes: int, gpus_per_node: int, topology: Topology, timeout_s: float | None) -> None:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"argv={argv!r}: must be a non-empty list of strings (the command to run per rank)")
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: must be a positive integer")
    if nodes > 250:
        raise ValueError(f"nodes={nodes}: the emulated subnet holds at most 250 nodes")
    if not isinstance(topology, Topology):
        raise ValueError(f"topology={topology!r}: must be a monta.emulate.Topology")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: must be positive (or None for no limit)")


def launch(
    argv: Sequence[str],
    nodes: int,
    gpus_per_node: int,
    topology: Topology | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    log_dir: str | os.PathLike | None = None,
    allow_unshaped: bool = False,
    check: bool = True,
    stdout: TextIO | None = None,
    master_port: int = 29500,
    stall_s: float | None = None,
    preload: Sequence[str] = (),
) -> LaunchResult:
    """Run ``argv`` once per rank on ``nodes`` x ``gpus_per_node`` emulated ranks.

    Each rank gets torchrun's environment (MASTER_ADDR = node 0, RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, GROUP_RANK), GLOO_SOCKET_IFNAME = its node's NIC, and MONTA_NODE,
    MONTA_NODES, MONTA_GPUS_PER_NODE, MONTA_HOST, MONTA_BIND_ADDR, MONTA_NODE_ADDRS,
    MONTA_EMULATED; ``env`` is added on top of the caller's environment (OMP_NUM_THREADS, MKL_NUM_THREADS and
    the other thread counts are 1, or $MONTA_RANK_THREADS, whatever the caller's say: the ranks share this
    machine's cores). Rank 0's stdout is streamed to ``stdout`` (default sys.stdout); every rank's stderr (and
    other ranks' stdout) goes to ``log_dir/rank{r}.log`` (a temporary directory, removed after a clean run, if
    not given). When a rank fails, the others are killed at once and RankFailed names it (``check=False``
    returns the result instead). A rank stopped by a signal, or (for ranks that report progress with
    ``monta.progress.beat``) no progress from any rank for ``stall_s`` seconds (default 120, ``MONTA_STALL_S``),
    is a failure too, naming the rank behind and where it was. Call from the main thread: the kill-on-exit
    chain is tied to the calling thread, and signal handlers can only be installed there. While it runs,
    SIGINT (as KeyboardInterrupt), SIGTERM and SIGHUP (as SystemExit) tear the whole tree down whatever
    disposition was inherited: a background shell starts its commands with SIGINT ignored, and an interrupt
    sent on purpose must still stop the ranks. ``preload``: modules the ranks of a ``python -m MODULE`` argv
    import, imported once by the supervisor, which forks the ranks from itself (``monta.emulate.forkstart``).
    """
    topology = topology if topology is not None else Topology.preset("unshaped")
    _validate(argv, nodes, gpus_per_node, topology, timeout_s)
    emulated = _can_emulate(nodes * gpus_per_node, allow_unshaped)
    own_log_dir = log_dir is None
    from monta import tmpdirs

    # Work directories of earlier runs that were killed (SIGKILL leaves them): their owner is gone.
    tmpdirs.clean_stale()
    logs = tmpdirs.make("monta-emulate-") if own_log_dir else Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    result_path = logs / "supervisor-result.json"
    result_path.unlink(missing_ok=True)
    spec = LaunchSpec(
        mode="netns" if emulated else "plain",
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        topology=topology,
        argv=tuple(argv),
        timeout_s=timeout_s,
        stall_s=stall_s,
        preload=tuple(preload),
        log_dir=str(logs),
        result_path=str(result_path),
        master_port=master_port if emulated else _free_port(),  # a stack per node: no clash; the fallback shares ours
    )
    spec_path = logs / "spec.json"
    spec.write(spec_path)
    sup_env = _supervisor_env(env)
    cmd = [sys.executable, "-m", "monta.emulate.supervisor", str(spec_path)]
    if emulated:
        cmd = UNSHARE + ["--"] + cmd
    captured, interrupted, returncode = _run_supervisor(cmd, sup_env, stdout, timeout_s)
    if own_log_dir:  # from here on every error names this folder: keep it (a clean run removes it below)
        tmpdirs.keep(logs)
    result = _read_result(result_path, logs, captured, interrupted, returncode, emulated)
    if result.ok and own_log_dir:
        shutil.rmtree(logs, ignore_errors=True)
    if (result.failure or {}).get("kind") in ("stalled", "timeout"):  # e.g. every rank waiting on a build lock
        from monta import extensions

        result.failure["message"] += extensions.stuck_note(sup_env)
    if check and not result.ok:
        raise RankFailed(_failure_message(result), result)
    return result


def _can_emulate(ranks: int, allow_unshaped: bool) -> bool:
    """Whether the ranks run in network namespaces; without them, NamespaceUnavailable, or (when
    ``allow_unshaped``) a warning that the ranks run unshaped on the loopback."""
    problem = namespace_problem()
    if problem and not allow_unshaped:
        raise NamespaceUnavailable(problem)
    if problem:
        msg = (
            f"WARNING: monta emulate: {problem.split(';')[0]}; running all {ranks} ranks "
            "UNSHAPED on 127.0.0.1: inter- and intra-node links are the same, results are NOT emulated"
        )
        warnings.warn(msg, RuntimeWarning, stacklevel=3)  # at launch()'s caller
        print(msg, file=sys.stderr, flush=True)
    return problem is None


def _supervisor_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The supervisor's (and so the ranks') environment."""
    package_root = str(Path(__file__).resolve().parents[2])
    # The ranks inherit the supervisor's environment (never written to disk: it may hold secrets).
    # Every rank of every node shares this machine's cores: one compute thread each, whatever the caller's
    # thread variables say (MONTA_RANK_THREADS to change it; ``env`` still wins). Snakemake exports
    # OMP/MKL/OPENBLAS/..._NUM_THREADS = a job's threads (2), meant for the job, not for each of its 8-16 ranks;
    # torch sizes its intra-op pool from MKL_NUM_THREADS too. Inherited, the ranks' extra workers made the
    # pipeline's calibration of 1-4 MiB collectives 2-3x slower than the same command by hand (an 8-rank
    # AllGather of 1 MiB: 57 ms instead of 19), and the performance model's error 71-79% instead of 8%.
    threads = os.environ.get(RANK_THREADS_ENV, "1")
    sup_env = {**os.environ, **{name: threads for name in THREAD_VARS}, **(env or {})}
    sup_env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, sup_env.get("PYTHONPATH")]))
    # DeepSpeed's CPU init loads a JIT-built op under a lock file: one build folder per venv, and a
    # lock that a killed rank left there is removed now rather than hanging every rank of this run.
    from monta import extensions

    extensions.configure(sup_env)
    for note in extensions.clear_stale_locks(sup_env):
        print(note, file=sys.stderr, flush=True)
    return sup_env


def _run_supervisor(
    cmd: list[str], sup_env: dict[str, str], stdout: TextIO | None, timeout_s: float | None
) -> tuple[list[str], list[str], int | None]:
    """Run the supervisor to its end, rank 0's stdout streamed to ``stdout``; the lines it printed, why it
    was killed (if it was) and its exit status. Any exception tears the whole tree down first."""
    out = stdout if stdout is not None else sys.stdout
    captured: list[str] = []
    interrupted: list[str] = []
    watchdog = None
    proc = None
    old_handlers = _install_handlers()  # before the tree exists: no signal can slip in between
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=sup_env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        if timeout_s is not None:
            watchdog = threading.Timer(timeout_s + _GRACE_S, lambda: _kill_tree(proc, interrupted, "watchdog"))
            watchdog.daemon = True
            watchdog.start()
        # Rank 0's stdout flows supervisor -> pipe -> here, line by line, so progress shows live.
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace")
            captured.append(line)
            out.write(line)
            out.flush()
        proc.wait()
    except BaseException as e:  # KeyboardInterrupt or SIGTERM (as SystemExit): take everything down
        if proc is not None:
            _kill_tree(proc, interrupted, type(e).__name__)
        raise
    finally:
        _restore_handlers(old_handlers)
        if watchdog is not None:
            watchdog.cancel()
        if proc is not None:
            if proc.poll() is None:
                _kill_tree(proc, interrupted, "cleanup")
            proc.stdout.close()
    return captured, interrupted, proc.returncode


def _read_result(
    result_path: Path, logs: Path, captured: list[str], interrupted: list[str], returncode, emulated: bool
) -> LaunchResult:
    """The supervisor's result file as a LaunchResult; EmulationError when it wrote none or failed early."""
    if not result_path.exists():
        why = "killed by the launcher's watchdog" if interrupted else f"exit status {returncode}"
        raise EmulationError(f"the emulated cluster's supervisor died without a result ({why}); logs in {logs}")
    res_json = json.loads(result_path.read_text())
    if res_json.get("error"):
        raise EmulationError(f"emulated run failed before its ranks ran: {res_json['error']} (logs in {logs})")
    return LaunchResult(
        returncodes=res_json["returncodes"],
        ranks=[RankInfo(**r) for r in res_json.get("ranks", [])],
        log_dir=logs,
        stdout="".join(captured),
        emulated=emulated,
        failure=res_json.get("failure"),
        links=res_json.get("links") or {},
        setup_s=res_json.get("setup_s"),
    )


def _failure_message(result: LaunchResult) -> str:
    failure = result.failure or {"message": f"ranks exited with {result.returncodes}"}
    msg = f"emulated run failed: {failure['message']}"
    if failure.get("log"):
        tail = _tail(Path(failure["log"]))
        msg += f"\n  log {failure['log']}" + (f", last lines:\n{tail}" if tail else " (empty)")
    else:
        msg += f"\n  logs in {result.log_dir}"
    return msg


def _kill_tree(proc: subprocess.Popen, note: list[str], why: str) -> None:
    """SIGKILL the unshare process: --kill-child then kills PID 1, and the kernel the whole PID namespace."""
    note.append(why)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # also reaches the fallback's ranks' supervisor
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _install_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    # SIGINT explicitly too: inherited as ignored (a background non-interactive shell does that),
    # Python installs no KeyboardInterrupt handler and an interrupt would leave every rank running.
    old = {signal.SIGINT: signal.signal(signal.SIGINT, _raise_interrupt)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, _raise_exit)
    return old


def _restore_handlers(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)
