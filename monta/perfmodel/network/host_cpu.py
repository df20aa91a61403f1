"""The emulator's host-CPU terms, once: every emulated rank runs on the same few cores, so an operation's
CPU work is a demand on one shared resource ("cpu", in machine time) next to the nodes' NICs ("inter").
CPU per rank -> machine time: x world size / cores (SPMD: every rank runs the same operation). The
loopback is CPU work too: an intra-node transfer's time is machine CPU time. The one scheduler of every
exchange's steps (``schedule``) builds its fluid demands here."""

from __future__ import annotations

from monta.hardware.links import Cluster
from monta.perfmodel.network.collectives import CollTime


def per_rank_to_machine(cluster: Cluster) -> float:
    return cluster.world_size / cluster.host_cores


def alltoall_demand(ct: CollTime, cluster: Cluster) -> dict[str, float]:
    """A call moving data between ranks (an AllToAll, a token-level send): its NIC time, and as CPU the
    intra-node transfer plus the calibrated per-call and per-inter-node-byte cost (``a2a_cpu_us``)."""
    fixed, per_byte = cluster.a2a_cpu_us
    return {
        "inter": ct.inter_us,
        "cpu": ct.intra_us + (fixed + per_byte * ct.inter_bytes) * per_rank_to_machine(cluster),
    }


def gather_demand(ct: CollTime, name: str, steps: int, cluster: Cluster) -> dict[str, float]:
    """A gather of ``steps`` ring steps: the calibrated curve gives its time alone (all nodes at once); only
    the CPU it burns (``ag_cpu_us``) is shared with an overlapping call, the rest is waiting (wake-ups,
    ring hand-offs): its own resource ``own:NAME``."""
    step_us, per_byte = cluster.ag_cpu_us
    cpu = (step_us * steps + per_byte * (ct.intra_bytes + ct.inter_bytes)) * per_rank_to_machine(cluster)
    if cpu <= 0:  # no CPU measurement: treat the gather as all CPU work
        cpu = ct.intra_us
    return {"cpu": min(cpu, ct.time_us), f"own:{name}": ct.intra_us, "inter": ct.inter_us}


def copy_demand(nbytes: float, cluster: Cluster) -> dict[str, float]:
    """A memory copy of ``nbytes`` (packing a slice, placing what arrived): CPU work at the copy rate."""
    return {"cpu": nbytes / (cluster.copy_GBps * 1e3) * per_rank_to_machine(cluster)}
