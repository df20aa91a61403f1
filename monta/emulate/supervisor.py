"""PID 1 of an emulated cluster: builds the network, starts every rank, kills all when one fails.

Run by the launcher as ``python -m monta.emulate.supervisor SPEC.json`` inside the outer
namespaces (or as a plain child in the unshaped fallback); writes its outcome to ``result_path``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from monta.emulate import forkstart
from monta.emulate.launch_spec import LaunchSpec
from monta.emulate.privileges import drop_capabilities
from monta.emulate.ranks import RankInfo, layout, rank_env

_PR_SET_PDEATHSIG = 1
_POLL_S = 0.02
_PROGRESS_POLL_S = 1.0
# A rank stopped by a signal (SIGSTOP, SIGTSTP: state T in /proc) this long is a failure: nothing
# in a run stops its own ranks, and its peers would wait for it until the collective timeout.
STOPPED_S = 10.0
# No rank reported progress this long (MONTA_PROGRESS_DIR heartbeats, between iterations): the run
# is stuck; the rank that is behind is named. Armed only once every rank has reported once.
DEFAULT_STALL_S = 120.0
# ... and the median rank used less than this share of a core over that time (blocked, not computing;
# a rank that works, even starved on a loaded 2-core machine, gets several % of a core).
STALL_CPU_SHARE = 0.01
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the process that started it exits, however it exits."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def describe_exit(code: int) -> str:
    return f"exited with signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exited with code {code}"


class Supervisor:
    def __init__(self, spec: LaunchSpec):
        self.spec = spec
        self.nodes = spec.nodes
        self.gpn = spec.gpus_per_node
        self.topology = spec.topology
        self.emulated = spec.emulated
        self.log_dir = Path(spec.log_dir)
        self.stop_reason: str | None = None
        self.procs: dict[int, subprocess.Popen | forkstart.ForkedRank] = {}  # rank -> process
        self.codes: dict[int, int] = {}  # rank -> exit code (negative: signal)
        self.net_nodes: list = []
        self.notes: list[str] = []
        self.tuning: dict[str, Any] = {}
        self.progress_dir = self.log_dir / "progress"
        self.stall_s = float(os.environ.get("MONTA_STALL_S") or spec.stall_s or DEFAULT_STALL_S)
        self.stopped_since: dict[int, float] = {}
        self.cpu_samples: list[tuple[float, dict[int, float]]] = []  # (monotonic time, CPU seconds per rank)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_reason = f"interrupted by {signal.Signals(signum).name}"

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        result: dict[str, Any] = {"failure": None, "error": None}
        t0 = time.monotonic()
        try:
            ranks = self._setup()
            result["ranks"] = [r.to_dict() for r in ranks]
            result["setup_s"] = round(time.monotonic() - t0, 3)
            result["tuning"] = self.tuning
            self._start(ranks)
            result["failure"] = self._watch(ranks)
            result["links"] = self._link_stats()
        except Exception as e:  # setup errors: reported to the launcher as one line
            result["error"] = str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
        finally:
            self._kill_all()
            result["returncodes"] = [self.codes.get(r) for r in range(self.nodes * self.gpn)]
            result["elapsed_s"] = round(time.monotonic() - t0, 3)
            tmp = Path(self.spec.result_path + ".tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(self.spec.result_path)
        return 0 if not (result["failure"] or result["error"]) else 1

    # -- phases -----------------------------------------------------------------------------
    def _setup(self) -> list[RankInfo]:
        if not self.emulated:
            return layout(
                self.nodes, self.gpn, ["127.0.0.1"] * self.nodes, [f"node{n}" for n in range(self.nodes)], "lo"
            )
        from monta.emulate import netns

        self.net_nodes = netns.build(self.nodes, self.topology, str(self.log_dir), self.notes)
        for note in self.notes:  # what the kernel refused, said once at start-up
            print(f"monta emulate: WARNING: {note}", file=sys.stderr, flush=True)
        tuning = self.net_nodes[0].tuning if self.net_nodes else {}
        self.tuning = {**tuning, "notes": list(self.notes)}
        return layout(
            self.nodes,
            self.gpn,
            [n.addr for n in self.net_nodes],
            [netns.hostname(n.index) for n in self.net_nodes],
            netns.NIC,
        )

    def _start(self, ranks: list[RankInfo]) -> None:
        base_env = dict(os.environ)
        self.progress_dir.mkdir(exist_ok=True)
        base_env["MONTA_PROGRESS_DIR"] = str(self.progress_dir)
        # A rank killed by SIGABRT/SIGSEGV (a C++ std::terminate in gloo or c10d, say) writes the Python
        # stack of every thread to its log, so the error can say where it was (launcher._tail).
        base_env.setdefault("PYTHONFAULTHANDLER", "1")
        node_addrs = [r.addr for r in ranks if r.local_rank == 0]
        argv, preload = list(self.spec.argv), list(self.spec.preload)
        fork = forkstart.enabled(argv, preload)
        if fork:  # the heavy imports once, here, instead of in every rank at once (forkstart)
            why_not = forkstart.import_all(preload)
            if why_not:
                print(f"monta emulate: WARNING: {why_not}", file=sys.stderr, flush=True)
                fork = False
        for info in ranks:
            if self.stop_reason:
                return
            env = {
                **base_env,
                **rank_env(info, self.nodes, self.gpn, node_addrs, self.spec.master_port, self.emulated),
            }
            env["MONTA_NET_TUNING"] = json.dumps(self.tuning)  # what the ranks' records say of the testbed
            log = open(self.log_dir / f"rank{info.rank}.log", "wb")
            fds = self.net_nodes[info.node].ns_fds() if self.emulated else []

            def preexec(fds=fds, emulated=self.emulated) -> None:
                die_with_parent()
                if fds:
                    from monta.emulate.netns import enter

                    enter(fds)
                if emulated:  # the network is set up: the rank needs no capability from here on
                    drop_capabilities()

            try:
                if fork:
                    out = None if info.rank == 0 else log.fileno()
                    close = [fd for fd, _ in fds]
                    self.procs[info.rank] = forkstart.start(argv, env, out, log.fileno(), preexec, close)
                    continue
                self.procs[info.rank] = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=None if info.rank == 0 else log,
                    stderr=log,
                    start_new_session=True,
                    preexec_fn=preexec,
                    pass_fds=[fd for fd, _ in fds],
                )
            except (OSError, subprocess.SubprocessError) as e:
                raise RuntimeError(f"cannot start rank {info.rank}: {e}") from None
            finally:
                log.close()
                for fd, _ in fds:
                    os.close(fd)

    def _watch(self, ranks: list[RankInfo]) -> dict[str, Any] | None:
        timeout = self.spec.timeout_s
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        by_pid = {p.pid: r for r, p in self.procs.items()}
        next_check = time.monotonic() + _PROGRESS_POLL_S
        while len(self.codes) < len(self.procs):
            failed = self._reap(by_pid)
            if failed:
                # Several ranks can die in one poll (peers notice the culprit's closed sockets):
                # blame a signal death first, then the lowest rank.
                rank = min(failed, key=lambda r: (self.codes[r] >= 0, r))
                info = ranks[rank]
                others = [f"rank {r} {describe_exit(self.codes[r])}" for r in sorted(failed) if r != rank]
                return {
                    "kind": "rank",
                    "rank": rank,
                    "node": info.node,
                    "returncode": self.codes[rank],
                    "message": f"rank {rank} (node {info.node}) {describe_exit(self.codes[rank])}"
                    + (f"; also {', '.join(others)}" if others else ""),
                    "log": str(self.log_dir / f"rank{rank}.log"),
                }
            if self.stop_reason:
                return {"kind": "interrupted", "message": self.stop_reason}
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + _PROGRESS_POLL_S
                stalled = self._stalled(ranks)
                if stalled:
                    return stalled
            if deadline is not None and time.monotonic() > deadline:
                running = sorted(set(self.procs) - set(self.codes))
                return {
                    "kind": "timeout",
                    "message": f"timed out after {timeout:g} s; ranks still running: {', '.join(map(str, running))}",
                }
            time.sleep(_POLL_S)
        return None

    def _progress(self, rank: int) -> tuple[int, float, str] | None:
        from monta.progress import read

        return read(str(self.progress_dir / f"rank{rank}"))

    def _where(self, rank: int) -> str:
        p = self._progress(rank)
        if p is None:
            return "before its first progress report (starting up)"
        n, t, where = p
        return f"last progress {time.time() - t:.0f} s ago: {where} (report {n})"

    def _stalled(self, ranks: list[RankInfo]) -> dict[str, Any] | None:
        """A rank stopped by a signal for STOPPED_S, or no progress from any rank for stall_s."""
        now = time.monotonic()
        running = [r for r in self.procs if r not in self.codes]
        for r in running:
            state = _proc_state(self.procs[r].pid)
            if state in ("T", "t"):
                since = self.stopped_since.setdefault(r, now)
                if now - since >= STOPPED_S:
                    info = ranks[r]
                    return {
                        "kind": "stalled",
                        "rank": r,
                        "node": info.node,
                        "message": f"rank {r} (node {info.node}) stalled: stopped by a signal (process state "
                        f"{state}, e.g. SIGSTOP) for {now - since:.0f} s, its peers waiting on it; "
                        f"{self._where(r)}",
                        "log": str(self.log_dir / f"rank{r}.log"),
                    }
            else:
                self.stopped_since.pop(r, None)
        # CPU the ranks used: a rank that computes (a slow start-up on a loaded machine, a long
        # phase between two reports) is busy, not stalled; ranks blocked on a peer use next to none.
        cpu = {r: _proc_cpu_s(self.procs[r].pid) for r in running}
        self.cpu_samples.append((now, cpu))
        while len(self.cpu_samples) > 2 and self.cpu_samples[1][0] <= now - self.stall_s:
            self.cpu_samples.pop(0)
        reports = {r: self._progress(r) for r in running}
        if not running or any(p is None for p in reports.values()):
            return None  # not every rank reports progress (yet): the stall limit is not armed
        newest = max(p[1] for p in reports.values())
        if time.time() - newest < self.stall_s:
            return None
        t_old, cpu_old = self.cpu_samples[0]
        if now - t_old < self.stall_s:
            return None  # not watched for long enough yet
        used = sorted(cpu[r] - cpu_old.get(r, 0.0) for r in running)
        if used[len(used) // 2] > STALL_CPU_SHARE * (now - t_old):
            return None  # no report, but the ranks are working (the median rank: rank 0 samples the host)
        if _building_op():
            return None  # waiting on DeepSpeed's op build: its compiler's CPU is not the ranks' own
        # The rank that is behind: fewest reports (its peers went on to the next collective), then oldest.
        r = min(reports, key=lambda k: (reports[k][0], reports[k][1]))
        info = ranks[r]
        return {
            "kind": "stalled",
            "rank": r,
            "node": info.node,
            "message": f"rank {r} (node {info.node}) stalled: no rank made progress or used CPU for "
            f"{self.stall_s:g} s and rank {r} is furthest behind; {self._where(r)}",
            "log": str(self.log_dir / f"rank{r}.log"),
        }

    def _reap(self, by_pid: dict[int, int]) -> list[int]:
        """waitpid(-1) ourselves: as PID 1 we also reap orphans, which Popen.poll would not."""
        failed = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return failed
            if pid == 0:
                return failed
            rank = by_pid.get(pid)
            if rank is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            self.codes[rank] = code
            self.procs[rank].returncode = code
            if code != 0:
                failed.append(rank)

    def _link_stats(self) -> dict[str, Any]:
        if not self.emulated:
            return {}
        from monta.emulate import netns

        return {str(n.index): netns.link_stats(n) for n in self.net_nodes}

    def _kill_all(self) -> None:
        for rank, proc in self.procs.items():
            if rank not in self.codes:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5.0
        by_pid = {p.pid: r for r, p in self.procs.items()}
        while len(self.codes) < len(self.procs) and time.monotonic() < deadline:
            self._reap(by_pid)
            time.sleep(_POLL_S)
        for n in self.net_nodes:
            n.holder.kill()
            n.holder.wait()


def _proc_state(pid: int) -> str | None:
    """The process state letter from /proc/PID/stat (R, S, D, T stopped, t traced, Z, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _building_op() -> bool:
    """A torch-extension build lock that a live process holds: a rank is building (or checking) a DeepSpeed
    op and the others wait on it at start-up. A rebuild takes minutes on a loaded machine; killed as a stall,
    the builder left its lock behind."""
    from monta import extensions

    root = extensions.build_root()
    present = extensions.locks(root)
    return bool(present) and len(extensions.stale_locks(root, min_age_s=0.0)) < len(present)


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads, and its children it waited for)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in f[11:15]) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def main(argv: list[str]) -> int:
    spec = LaunchSpec.read(Path(argv[0]))
    if not spec.emulated:
        die_with_parent()
    return Supervisor(spec).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
