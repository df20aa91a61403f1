"""Vendors' stated expectations and published crossovers (``data/published/claims.csv``) checked against the model.

Each claim has a machine-readable ``kind`` with ``params`` and ``expected`` (JSON); a check per kind prices the
claim's setup on a cluster built from its hardware the way ``monta predict published`` builds one (the GPU's
cluster file, the stated NICs) and says whether the model agrees: a stated figure within :data:`TOLERANCE`, a
stated maximum not exceeded, a crossover in the stated direction. A kind the model does not describe (NVLink
SHARP, NCCL's tree on two nodes, benchmarking advice) is reported as ``not modelled``, with why.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from monta.parallel import ParallelLayout
from monta.perfmodel.network import collectives
from monta.perfmodel.reports.published import Row, blind_cluster

TOLERANCE = 0.10
LARGE = 8 * 2**30  # "large messages" where a claim states no size

# Systems a claim names without its parts (NVIDIA's DGX datasheets).
SYSTEMS = {
    "DGX-1": {"gpu": "V100", "gpus_per_node": 8, "nic_per_node": 4, "nic_gbps": 100},
    "DGX-A100": {"gpu": "A100", "gpus_per_node": 8, "nic_per_node": 8, "nic_gbps": 200},
}


def _ring(c):
    """The cluster with its library restricted to rings (NCCL_ALGO=RING: how a network rate is measured)."""
    from dataclasses import replace

    return replace(c, allreduce_algorithms=("ring",))


def _cluster(params: dict, nodes: int = 2, **defaults):
    p = {**defaults, **SYSTEMS.get(params.get("system", ""), {}), **params}
    gpn = int(p.get("gpus_per_node", 8))
    row = {
        "id": "claim",
        "collective": "all_reduce_perf",
        "gpu": str(p.get("gpu") or ("H100" if float(p.get("nic_gbps", 0)) >= 400 else "A100")),
        "nodes": str(p.get("nodes", nodes)),
        "gpus_per_node": str(gpn),
        "nic_per_node": str(p.get("nic_per_node", gpn)),
        "nic_gbps": str(p.get("nic_gbps", 200)),
    }
    c, why = blind_cluster(Row(row))
    if c is None:
        raise ValueError(why)
    return c


def _world(c):
    """The whole cluster as one group (nccl-tests' run): the data-parallel axis of a TP-1 layout on it."""
    return ParallelLayout(c.nodes, c.gpus_per_node).shape("dp")


def _allreduce_busbw(c, size: float) -> float:
    g = _world(c)
    return collectives.busbw_GBps("allreduce", size, collectives.allreduce(size, g, c).time_us, c.world_size)


def _alltoall(c, size: float):
    g = _world(c)
    t = collectives.alltoall(size, g, c)
    return t, collectives.busbw_GBps("alltoall", size, t.time_us, c.world_size)


def _near(model: float, stated) -> bool:
    if isinstance(stated, list):
        lo, hi = min(stated), max(stated)
        return lo * (1 - TOLERANCE) <= model <= hi * (1 + TOLERANCE)
    return abs(model - float(stated)) <= TOLERANCE * float(stated)


def _verdict(ok: bool) -> str:
    return "agrees" if ok else "disagrees"


def check_nic_busbw(params, expected):
    nics = int(params.get("nic_per_node", 8 if "busbw_GBps_node_max" in expected else 1))
    c = _ring(_cluster(params, nic_per_node=nics))  # a NIC's rate is what a ring measures (C15: NCCL_ALGO=RING)
    bus = _allreduce_busbw(c, float(params.get("size_bytes", LARGE)))
    per_nic = bus / c.nics_per_node
    out = []
    if "busbw_GBps_per_nic" in expected:
        out.append(
            (f"ring all_reduce busbw per NIC {per_nic:.1f} GB/s", _near(per_nic, expected["busbw_GBps_per_nic"]))
        )
    if "busbw_GBps_per_nic_max" in expected:
        hi = max(expected["busbw_GBps_per_nic_max"])
        out.append((f"busbw per NIC {per_nic:.1f} GB/s (stated max {hi})", per_nic <= hi * (1 + TOLERANCE / 2)))
    if "busbw_GBps" in expected:
        out.append((f"ring all_reduce busbw {bus:.1f} GB/s", _near(bus, expected["busbw_GBps"])))
    if "busbw_GBps_node_max" in expected:
        hi = expected["busbw_GBps_node_max"]
        out.append((f"node busbw {bus:.1f} GB/s (stated max {hi})", bus <= hi * (1 + TOLERANCE / 2)))
    return out


def check_nvlink_busbw(params, expected):
    c = _cluster(params, nodes=1)
    bus = _allreduce_busbw(c, float(params.get("size_bytes", LARGE)))
    return [(f"one-node all_reduce busbw {bus:.1f} GB/s", _near(bus, expected["busbw_GBps"]))]


def check_alltoall_no_nic_aggregation(params, expected):
    c = _cluster(params)
    S = LARGE / 8
    t, _ = _alltoall(c, S)
    remote = S * (c.world_size - c.gpus_per_node) / c.world_size
    per_gpu = remote / t.inter_us / 1e3  # GB/s one GPU pushes across nodes
    nics = per_gpu / c.inter.bandwidth_GBps
    return [(f"a GPU's AllToAll moves {per_gpu:.1f} GB/s = {nics:.2f} NICs' effective rate", _near(nics, 1.0))]


def check_alltoall_node_ratio(params, expected):
    out = []
    for nodes in (2, 4, 8, 32):
        c = _cluster({"gpu": "H100", "nic_gbps": 400}, nodes=nodes)
        _, bus = _alltoall(c, LARGE / 8)
        per_gpu = c.per_gpu_GBps[1]
        ratio = bus / per_gpu
        out.append((f"{nodes} nodes: busbw / per-GPU network {ratio:.2f} (N/(N-1) = {nodes / (nodes - 1):.2f})",
                    _near(ratio, nodes / (nodes - 1))))  # fmt: skip
    return out


def check_alltoall_busbw_factor(params, expected):
    c = _cluster({"gpu": "H100", "nic_gbps": 400, "gpus_per_node": 1, "nic_per_node": 1}, nodes=4)
    _, bus = _alltoall(c, LARGE / 8)
    return [(f"one GPU per node: busbw {bus:.1f} GB/s vs its NIC {c.inter.bandwidth_GBps:.1f}",
             _near(bus, c.inter.bandwidth_GBps))]  # fmt: skip


def check_alltoall_shared_nic(params, expected):
    from dataclasses import replace

    c = _cluster({"gpu": "A100", **params}, nodes=4)
    c = replace(c, inter=replace(c.inter, bandwidth_GBps=float(params["nic_busbw_GBps"])))
    t, _ = _alltoall(c, LARGE / 8)
    S = LARGE / 8
    per_gpu = S * (c.world_size - c.gpus_per_node) / c.world_size / t.inter_us / 1e3
    text = f"{c.gpus_per_node} GPUs on one {params['nic_busbw_GBps']} GB/s NIC: {per_gpu:.2f} GB/s each"
    return [(text, _near(per_gpu, expected["busbw_GBps_per_gpu"]))]


def check_allreduce_busbw(params, expected):
    """A system's ring figure (and its per-NIC share); where a 2-node tree figure is stated too, the model's tree
    must come out above its ring (the direction: such recollections give no size)."""
    c = _cluster(params)
    ring = _allreduce_busbw(_ring(c), LARGE)
    out = [(f"ring all_reduce busbw {ring:.1f} GB/s", _near(ring, expected["busbw_GBps"]))]
    if "busbw_GBps_per_nic" in expected:
        per = ring / c.nics_per_node
        out.append((f"per NIC {per:.1f} GB/s", _near(per, expected["busbw_GBps_per_nic"])))
    if "busbw_GBps_2node_tree" in expected:
        tree = _allreduce_busbw(c.with_nodes(2), LARGE)
        stated = expected["busbw_GBps_2node_tree"]
        out.append((f"2-node tree {tree:.1f} GB/s above the ring's {ring:.1f} (stated {stated})", tree > ring))
    return out


def check_tree_2node(params, expected):
    """NCCL's tree on 2 nodes: up to 2x the network's rate (the ring's), never more."""
    c = _cluster({"gpu": "H100", "nic_gbps": 400})
    ring, tree = _allreduce_busbw(_ring(c), LARGE), _allreduce_busbw(c, LARGE)
    hi = expected["busbw_over_network_max"]
    return [(f"2 x 8 H100: tree busbw {tree:.0f} / ring {ring:.0f} = {tree / ring:.2f} (stated at most {hi})",
             1.0 < tree / ring <= hi)]  # fmt: skip


def check_nvls(params, expected):
    """NVLink SHARP AllReduce on one NVSwitch-3 node (the h100 file takes its algbw from this very statement,
    so this checks that the model carries it through to a busbw, not the figure itself)."""
    c = _cluster({"gpu": "H100", "nic_gbps": 400, **params}, nodes=1)
    S = LARGE
    g = _world(c)
    t = collectives.allreduce(S, g, c).time_us
    alg, bus = collectives.algbw_GBps(S, t), collectives.busbw_GBps("allreduce", S, t, c.world_size)
    return [
        (
            f"8 GiB: algbw {alg:.0f}, busbw {bus:.0f} GB/s",
            _near(alg, expected["algbw_GBps"]) and _near(bus, expected["busbw_GBps"]),
        )
    ]


def check_link(params, expected):
    c = _cluster(params, nodes=1)
    if "nic_GBps" in expected:
        c = _cluster({"gpu": "H100", **params})
        return [(f"NIC effective {c.inter.bandwidth_GBps:.1f} GB/s (stated max {expected['nic_GBps']})",
                 c.inter.bandwidth_GBps <= expected["nic_GBps"])]  # fmt: skip
    want = expected.get("nvlink_GBps", expected.get("busbw_GBps"))
    return [(f"NVLink effective {c.intra.bandwidth_GBps:.1f} GB/s", _near(c.intra.bandwidth_GBps, want))]


def check_crossover_2dh(params, expected):
    """A hierarchical AllToAll (the claim's ``exchange``, Tutel's 2DH in the project's table) against the flat
    one (``flat``) at TP 1, 8 GPUs a node, as the GPU count grows: slower at 16 GPUs, faster beyond a crossover."""
    from monta.perfmodel.network.routed import routed_exchange_time

    hier_x, flat_x = params["exchange"], params.get("flat", "deepspeed")
    out = []
    for mib in (1, 4, 16):
        slower_at, faster_at = [], []
        for nodes in (2, 4, 8, 16, 32, 64, 128):
            lay = ParallelLayout(nodes=nodes, gpus_per_node=8, tp=1, ep=nodes * 8)
            c = _cluster({"gpu": "A100", "nic_per_node": 8, "nic_gbps": 200}, nodes=nodes)
            flat = routed_exchange_time(flat_x, mib * 2**20, lay, c).total_us
            hier = routed_exchange_time(hier_x, mib * 2**20, lay, c).total_us
            (faster_at if hier < flat else slower_at).append(nodes * 8)
        cross = min(faster_at) if faster_at else None
        ok = bool(slower_at) and bool(faster_at) and max(slower_at) < min(faster_at) and min(slower_at) == 16
        out.append((f"{mib} MiB per GPU: {hier_x} slower at {slower_at or '-'} GPUs, faster from {cross or '-'}", ok))
    return out


def check_crossover_dispatcher(params, expected):
    """An AllGather dispatcher (the claim's ``exchange``, Megatron-Core's in the project's table) against the
    AllToAll one (``flat``) on 2 x 8 (EP over nodes): ``expected["better_dispatcher"]`` names the kind that
    should win, "allgather" (at very large top-k) or "alltoall" (at the usual top-k)."""
    from monta.perfmodel.network.routed import routed_exchange_time

    gather_x, flat_x = params["exchange"], params.get("flat", "deepspeed")
    c = _cluster({"gpu": "H100", "nic_gbps": 400})
    lay = ParallelLayout(nodes=2, gpus_per_node=8, tp=1, ep=16)
    S = 64 * 2**20
    want_gather = expected["better_dispatcher"] == "allgather"
    res = []
    for top_k in (1, 2) if not want_gather else (16,):
        ag = routed_exchange_time(gather_x, S, lay, c, top_k=top_k, experts=32).total_us
        a2a = routed_exchange_time(flat_x, S, lay, c, top_k=top_k, experts=32).total_us
        gather_wins = ag < a2a
        winner = gather_x if gather_wins else flat_x
        res.append((f"EP 16, top-{top_k}: {winner} faster ({ag:.0f} vs {a2a:.0f} us)", gather_wins == want_gather))
    return res


NOT_MODELLED = {
    "two_node_measure_with_ring": "benchmarking advice, not a figure",
}

CHECKS = {
    "nic_busbw_range": check_nic_busbw,
    "nvlink_busbw": check_nvlink_busbw,
    "alltoall_no_nic_aggregation": check_alltoall_no_nic_aggregation,
    "alltoall_2node_busbw_ratio": check_alltoall_node_ratio,
    "alltoall_busbw_factor": check_alltoall_busbw_factor,
    "alltoall_shared_nic": check_alltoall_shared_nic,
    "allreduce_busbw": check_allreduce_busbw,
    "tree_2node_busbw_ratio": check_tree_2node,
    "nvls_allreduce_busbw": check_nvls,
    "nvlink_effective_bw": check_link,
    "nvlink_max_bw": check_link,
    "nic_max_bw": check_link,
    "crossover_2dh": check_crossover_2dh,
    "crossover_dispatcher": check_crossover_dispatcher,
}


# A claim's ``role`` column (data/published/README.md): "test" (the model derives the figure from other inputs: it
# counts), "input" (the figure is, or is derived from, a number the model takes as given), "construction" (true by how
# the model is built), "seen" (it shaped a model term), "advice" (not a figure). A file without the column: all tests.
ROLES = ("test", "input", "construction", "seen", "advice")


def check_claims(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"claims file {p} not found (the project's: data/published/claims.csv)")
    out = []
    with p.open(newline="") as f:
        for r in csv.DictReader(f):
            kind = r["kind"].strip()
            rec = {"id": r["id"], "kind": kind, "source_url": r["source_url"], "verdict": None, "checks": []}
            # What agreeing means (ROLES): only a "test" claim checks something the model was not given.
            rec["role"], rec["role_note"] = (r.get("role") or "test").strip(), (r.get("role_note") or "").strip()
            if kind in NOT_MODELLED:
                rec["verdict"], rec["why"] = "not modelled", NOT_MODELLED[kind]
            elif kind not in CHECKS:
                rec["verdict"], rec["why"] = "not checked", f"no check for kind {kind!r}"
            else:
                params, expected = json.loads(r["params"] or "{}"), json.loads(r["expected"] or "{}")
                checks = CHECKS[kind](params, expected)
                rec["checks"] = [{"model": text, "agrees": ok} for text, ok in checks]
                rec["verdict"] = _verdict(all(ok for _, ok in checks)) if checks else "not checked"
            out.append(rec)
    return out
