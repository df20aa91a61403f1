"""Builds the emulated network inside the outer namespace: one network namespace per node on a bridge.

Runs only inside the launcher's private user+net+pid namespace (it is PID 1's job), so everything
it creates dies with that namespace; nothing here ever runs in the host's network namespace.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from monta.emulate.shaping import link_commands
from monta.emulate.topology import Topology

SUBNET = "198.18.0"  # RFC 2544 benchmarking range, only ever inside our namespaces
NIC = "eth0"  # the node's NIC as its ranks see it (GLOO_SOCKET_IFNAME)
BRIDGE = "br0"
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
MAX_NODES = 250

_libc = ctypes.CDLL(None, use_errno=True)


def node_addr(node: int) -> str:
    return f"{SUBNET}.{node + 1}"


def hostname(node: int) -> str:
    return f"node{node}"


@dataclass
class Node:
    """One emulated host: a holder process keeps its net+UTS namespaces alive; ranks join them."""

    index: int
    holder: subprocess.Popen
    addr: str
    peer: str  # the veth end on the bridge (outer namespace)
    tuning: dict = field(default_factory=dict)  # TCP settings that took effect

    def ns_fds(self) -> list[tuple[int, int]]:
        pid = self.holder.pid
        return [
            (os.open(f"/proc/{pid}/ns/net", os.O_RDONLY), CLONE_NEWNET),
            (os.open(f"/proc/{pid}/ns/uts", os.O_RDONLY), CLONE_NEWUTS),
        ]


def enter(fds: list[tuple[int, int]]) -> None:
    """setns() into each (fd, nstype); for preexec_fn (Python 3.11 has no os.setns)."""
    for fd, nstype in fds:
        if _libc.setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({nstype:#x}): {os.strerror(err)}")


def _run(cmd: list[str], node: Node | None = None) -> str:
    if node is not None:
        cmd = ["nsenter", "-t", str(node.holder.pid), "-n", "--"] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"emulated network setup failed: {' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


# Socket buffers of a datacenter host. Linux starts TCP autotuning at 128 KiB, so a fresh gloo
# connection is window-limited when both directions are busy (the ACKs ride behind data in the
# shaped queue): measured at 0.5 Gbit/s, 4 MiB each way took 2.1x the ideal time on a new
# connection and 1.1x once autotuning had opened the window. Starting at 4 MiB removes the warm-up.
TCP_MEM = "4096 4194304 33554432"


def _keep_window_after_idle(node: Node, notes: list[str]) -> bool:
    """No slow start after idle; False (and a note) where the kernel refuses it. An RDMA queue pair sends at
    the link's rate after a pause, while TCP (by default) shrinks an idle connection's window back to its first
    one. With that restart a node's 8 AllToAll flows, starting together after the AllGather's second, took the
    one FIFO NIC unevenly: ranks left the AllToAll up to a third of its time apart and the AllGather of the
    ranks done first ran under it, deepspeed 6-8% under its halves' sum at 2 x 8 (docs/testbed.md, the early
    AllGather)."""
    try:
        _run(["sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0"], node)
        return True
    except RuntimeError as e:
        notes.append(f"node {node.index}: tcp_slow_start_after_idle=0 refused ({e}); flows restart slow after idle")
        return False


def _tune_tcp(node: Node, cc: str, notes: list[str]) -> dict[str, object]:
    """TCP settings of one emulated node; what the kernel refuses is noted and left at its default.

    - congestion control: reno by default. With bbr (inherited from this host) 8-64 flows through
      the 4 MiB bulk queue lose packets at the sender's own egress and the paced flows leave the
      link idle 2-10% of the time; reno keeps 95% at 64 flows (docs/testbed.md).
    - quickack on the node's routes: a connection that carries data one way only (the duplex
      transport) gets pure ACKs back, which Linux delays by up to 40 ms; small pipelined chunks
      then stall (8 chunks of 4 MiB took 128-193 ms instead of 77). Both the NIC's subnet route and
      the local route (same-node traffic rides loopback) get it.
    - no slow start after idle (``_keep_window_after_idle``).
    """
    applied: dict[str, object] = {}
    for name in ("tcp_rmem", "tcp_wmem"):
        _run(["sysctl", "-q", "-w", f"net.ipv4.{name}={TCP_MEM}"], node)
    applied["slow_start_after_idle"] = not _keep_window_after_idle(node, notes)
    try:
        _run(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"], node)
        applied["tcp_cc"] = cc
    except RuntimeError as e:
        current = _run(["sysctl", "-n", "net.ipv4.tcp_congestion_control"], node).strip()
        notes.append(
            f"node {node.index}: congestion control {cc} refused ({e.args[0].rsplit(': ', 1)[-1]}); kept {current}"
        )
        applied["tcp_cc"] = current
    routes = [
        [
            "ip",
            "route",
            "replace",
            f"{SUBNET}.0/24",
            "dev",
            NIC,
            "proto",
            "kernel",
            "scope",
            "link",
            "src",
            node.addr,
            "quickack",
            "1",
        ],
        [
            "ip",
            "route",
            "replace",
            "local",
            node.addr,
            "dev",
            "lo",
            "table",
            "local",
            "proto",
            "kernel",
            "scope",
            "host",
            "src",
            node.addr,
            "quickack",
            "1",
        ],
    ]
    try:
        for cmd in routes:
            _run(cmd, node)
        applied["quickack"] = True
    except RuntimeError as e:
        notes.append(
            f"node {node.index}: quickack route refused ({e}); delayed ACKs stay on, small one-way "
            "transfers may stall up to 40 ms"
        )
        applied["quickack"] = False
    return applied


def _start_holder(index: int) -> subprocess.Popen:
    # sethostname runs in the fresh UTS namespace, then the holder just sleeps until killed.
    code = f"import socket,signal; socket.sethostname({hostname(index)!r}); print('ok', flush=True); signal.pause()"
    holder = subprocess.Popen(
        ["unshare", "--net", "--uts", "--", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    if holder.stdout.readline().strip() != "ok":
        raise RuntimeError(f"could not create the namespace of node {index} (unshare --net --uts failed)")
    return holder


def _add_hosts(nodes: int, scratch: str) -> None:
    """Make node0..N resolvable (c10d looks peers' names up) via a bind mount over /etc/hosts;
    the mount lives in our private mount namespace only. Best effort: names are cosmetic."""
    try:
        current = open("/etc/hosts").read()
    except OSError:
        current = ""
    path = os.path.join(scratch, "hosts")
    with open(path, "w") as f:
        f.write(current.rstrip("\n") + "\n" + "".join(f"{node_addr(k)} {hostname(k)}\n" for k in range(nodes)))
    subprocess.run(["mount", "--bind", path, "/etc/hosts"], capture_output=True)


def build(nodes: int, topology: Topology, scratch: str, notes: list[str] | None = None) -> list[Node]:
    """Create the bridge, one namespace + veth per node, addresses, TCP settings and the tc qdiscs.

    What the kernel refuses and the emulator worked around is appended to ``notes`` (one line each)."""
    notes = [] if notes is None else notes
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes={nodes}: the emulated subnet holds 1..{MAX_NODES} nodes")
    _add_hosts(nodes, scratch)
    _run(["ip", "link", "set", "lo", "up"])
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "link", "set", BRIDGE, "up"])
    half_delay = topology.latency_us / 2
    out: list[Node] = []
    for k in range(nodes):
        node = Node(index=k, holder=_start_holder(k), addr=node_addr(k), peer=f"veth{k}")
        out.append(node)
        _run(["ip", "link", "add", node.peer, "type", "veth", "peer", "name", NIC, "netns", str(node.holder.pid)])
        _run(["ip", "link", "set", node.peer, "master", BRIDGE])
        _run(["ip", "link", "set", node.peer, "up"])
        _run(["ip", "link", "set", "lo", "up"], node)
        _run(["ip", "addr", "add", f"{node.addr}/24", "dev", NIC], node)
        _run(["ip", "link", "set", NIC, "up"], node)
        node.tuning = _tune_tcp(node, topology.tcp_cc, notes)
        # Both directions of the NIC: node egress = its upload, bridge-side egress = its download.
        try:
            for cmd in link_commands(NIC, topology.inter_gbps, half_delay):
                _run(cmd, node)
            for cmd in link_commands(node.peer, topology.inter_gbps, half_delay):
                _run(cmd)
        except RuntimeError as e:
            if "netem" in str(e) and "unknown" in str(e):
                raise RuntimeError(
                    "--latency-us needs the netem qdisc (kernel module sch_netem), which this "
                    "kernel lacks; drop the latency or run on a kernel with sch_netem"
                ) from None
            raise
        for cmd in link_commands("lo", topology.intra_gbps):
            _run(cmd, node)
    return out


def link_stats(node: Node) -> dict[str, dict[str, int]]:
    """Bytes/packets through the node's NIC and loopback (shows where its traffic went)."""
    links = json.loads(_run(["ip", "-s", "-j", "link", "show"], node))
    out: dict[str, dict[str, int]] = {}
    for link in links:
        if link.get("ifname") in (NIC, "lo"):
            st = link.get("stats64", {})
            out[link["ifname"]] = {
                "tx_bytes": st.get("tx", {}).get("bytes", 0),
                "rx_bytes": st.get("rx", {}).get("bytes", 0),
            }
    return out
