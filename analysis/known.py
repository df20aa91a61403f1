"""What a record does not state but its producer knows: an emulator profile's links, a preset cluster's
inter-node rate and the bytes and routing the performance model used (monta_analysis.frames.to_frame calls fill)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monta.hardware import clusterfile

_POINT = ("size_bytes", "variant", "chunks", "nodes", "gpus_per_node", "tp")


def measured_rates(records: Sequence[Mapping[str, Any]]) -> dict[tuple, float]:
    """The NIC rate of each measured AllToAll point, keyed by its point and median time: what a
    `monta predict accuracy` row (which states the measurement it was scored against, not its rate) was
    priced at, the calibrated profile rescaled to that rate (monta.perfmodel.reports.accuracy.clock_factor)."""
    out = {}
    for r in records:
        p, m = r.get("params") or {}, r.get("metrics") or {}
        if r.get("kind") == "alltoall" and r.get("source") in ("emulated", "measured") and p.get("inter_gbps"):
            out[(*(p.get(k) for k in _POINT), m.get("time_us"))] = float(p["inter_gbps"])
    return out


def _priced_at(rec: Mapping[str, Any], topo: Mapping[str, Any], ran_at: Mapping[tuple, float]) -> dict[str, Any]:
    """The profile's links as an accuracy row was priced: rescaled to the NIC rate its measurement ran at."""
    p, m = rec.get("params") or {}, rec.get("metrics") or {}
    gbps = ran_at.get((*(p.get(k) for k in _POINT), m.get("measured_us")))
    if gbps is None or not topo.get("inter_gbps"):
        return dict(topo)
    factor = float(topo["inter_gbps"]) / gbps
    intra = topo.get("intra_gbps")
    return {**topo, "inter_gbps": gbps, "intra_gbps": None if intra is None else round(float(intra) / factor, 4)}


def fill(row: dict[str, Any], rec: Mapping[str, Any], ran_at: Mapping[tuple, float] | None = None) -> None:
    """A predicted point says which links it models: `emulator:<profile>` becomes the profile's
    links (the name alone, e.g. 'custom', says nothing), at the rate it was priced at (``ran_at``:
    measured_rates), a preset cluster its inter-node rate."""
    cluster = row.get("cluster")
    if not isinstance(cluster, str):
        return
    if cluster.startswith("emulator:"):
        topo = ((rec.get("config") or {}).get("profile") or {}).get("topology") or {}
        topo = _priced_at(rec, topo, ran_at or {})
        rate = lambda v: "unshaped" if v is None else f"{v:g} Gbit/s"  # noqa: E731
        if "inter_gbps" in topo:
            row["cluster"] = f"emulator links (inter {rate(topo['inter_gbps'])}, intra {rate(topo.get('intra_gbps'))})"
            if row.get("inter_gbps") is None and topo["inter_gbps"] is not None:
                row["inter_gbps"] = float(topo["inter_gbps"])
        else:
            row["cluster"] = "emulator links (calibrated profile)"
    elif row.get("source") == "predicted" and cluster in {*clusterfile.cluster_names(), *clusterfile.aliases()}:
        if rec.get("kind") == "step" and row.get("topk") is None:
            _preset_routing(row)
        if row.get("inter_gbps") is None:
            c = clusterfile.load_cluster(cluster)  # per node and direction, as the emulator's inter_gbps
            row["inter_gbps"] = round(c.inter.bandwidth_GBps * c.nics_per_node * 8, 1)
        if rec.get("kind") == "alltoall" and row.get("inter_bytes") is None:
            _model_bytes(row, cluster)


def _preset_routing(row: dict[str, Any]) -> None:
    """A predicted step states its model preset; top-k and capacity factor are the preset's."""
    from monta.model.config import resolve_config

    try:
        cfg = resolve_config(str(row.get("model")))
    except ValueError:
        return
    row.update(topk=cfg.top_k, capacity_factor=cfg.capacity_factor)


def _model_bytes(row: dict[str, Any], cluster: str) -> None:
    """Bytes of a prediction that states only times (`monta predict paper`), from the same model;
    legacy's too, for the inter-node byte ratio at that point."""
    from monta.perfmodel.network.alltoall import make_layout
    from monta.perfmodel.network.exchange import exchange_time

    try:
        layout = make_layout(int(row["nodes"]), int(row["gpus_per_node"]), int(row["tp"]), row.get("ep"))
        chunks = int(row["chunks"])
        b = exchange_time(row["variant"], float(row["size_bytes"]), layout, cluster, chunks)
        legacy = exchange_time("legacy", float(row["size_bytes"]), layout, cluster, 1)
    except (KeyError, TypeError, ValueError):
        return  # not a shape the model takes: leave the bytes unknown
    row.update(inter_bytes=b.inter_bytes, intra_bytes=b.intra_bytes, legacy_inter_bytes=legacy.inter_bytes)
