"""Predicted TP AllToAll sweep (sizes x variants x chunk counts) in the benchmark's own columns,
as a table and as ``source="predicted"`` records."""

from __future__ import annotations

from typing import Any

from monta.perfmodel.collectives import algbw_GBps, busbw_GBps
from monta.perfmodel.exchange import VARIANTS, exchange_time, layout_shapes
from monta.perfmodel.links import Cluster

COLUMNS = ("size(B)", "variant", "chunks", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "inter(B)", "intra(B)", "speedup")


def make_layout(nodes: int, gpus_per_node: int, tp: int, ep: int | None = None):
    from monta.parallel import ParallelLayout

    probe = ParallelLayout(nodes, gpus_per_node, tp=tp)  # validates nodes/gpus/tp first
    return ParallelLayout(nodes, gpus_per_node, tp=tp, ep=ep or probe.dp)


def parse_chunks(spec: str | list) -> list[int | str]:
    items = spec if isinstance(spec, list) else [x.strip() for x in str(spec).split(",") if x.strip()]
    out: list[int | str] = []
    for x in items:
        if x == "auto":
            out.append("auto")
            continue
        try:
            k = int(x)
        except (TypeError, ValueError):
            raise ValueError(f"chunks {x!r}: expected positive integers or 'auto' (e.g. 1,2,4,auto)") from None
        if k < 1:
            raise ValueError(f"chunks {k}: must be >= 1")
        out.append(k)
    if not out:
        raise ValueError("chunks: give at least one chunk count, e.g. 1,2,4,auto")
    return out


def parse_variants(spec: str) -> list[str]:
    out = [v.strip() for v in str(spec).split(",") if v.strip()]
    bad = [v for v in out if v not in VARIANTS]
    if bad or not out:
        raise ValueError(f"variants {spec!r}: choose from {', '.join(VARIANTS)}")
    return out


def sweep(
    cluster: Cluster, layout, sizes: list[int], variants: list[str], chunks: list[int | str]
) -> list[dict[str, Any]]:
    """One row per (size, variant, chunk count); chunk counts apply to ``monta`` only."""
    ep, _ = layout_shapes(layout)
    rows = []
    for size in sizes:
        legacy_t = exchange_time("legacy", size, layout, cluster).total_us
        for v in variants:
            for k in chunks if v == "monta" else [1]:
                b = exchange_time(v, size, layout, cluster, k)
                rows.append(
                    {
                        "size_bytes": size,
                        "variant": v,
                        "chunks": b.chunks,
                        "chunks_requested": k,
                        "time_us": b.total_us,
                        "algbw_GBps": algbw_GBps(size, b.total_us),
                        "busbw_GBps": busbw_GBps("alltoall", size, b.total_us, ep.size),
                        "inter_bytes": b.inter_bytes,
                        "intra_bytes": b.intra_bytes,
                        "a2a_us": b.a2a_us,
                        "ag_us": b.ag_us,
                        "copy_us": b.copy_us,
                        "pack_us": b.pack_us,
                        "speedup": legacy_t / b.total_us if b.total_us else float("nan"),
                    }
                )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = ["{:>12} {:>10} {:>7} {:>11} {:>12} {:>12} {:>12} {:>12} {:>8}".format(*COLUMNS)]
    for r in rows:
        ch = f"{r['chunks']}" + ("*" if r.get("chunks_requested") == "auto" else "")
        lines.append(
            f"{r['size_bytes']:>12} {r['variant']:>10} {ch:>7} {r['time_us']:>11.1f} {r['algbw_GBps']:>12.2f} "
            f"{r['busbw_GBps']:>12.2f} {r['inter_bytes']:>12.0f} {r['intra_bytes']:>12.0f} {r['speedup']:>8.2f}"
        )
    return "\n".join(lines)


def records(rows: list[dict[str, Any]], cluster: Cluster, layout, experiment: str = "predict-alltoall") -> list[dict]:
    from monta.results import make_record

    out = []
    for r in rows:
        params = {
            "size_bytes": r["size_bytes"],
            "variant": r["variant"],
            "chunks": r["chunks"],
            "chunks_requested": r["chunks_requested"],
            "nodes": layout.nodes,
            "gpus_per_node": layout.gpus_per_node,
            "tp": layout.tp,
            "ep": layout.ep,
            "cluster": cluster.name,
        }
        metrics = {
            k: r[k]
            for k in (
                "time_us",
                "algbw_GBps",
                "busbw_GBps",
                "inter_bytes",
                "intra_bytes",
                "speedup",
                "a2a_us",
                "ag_us",
                "copy_us",
                "pack_us",
            )
        }
        out.append(
            make_record(
                kind="alltoall",
                source="predicted",
                experiment=experiment,
                params=params,
                metrics=metrics,
                config={"cluster": cluster.to_dict(), "layout": layout.to_dict()},
            )
        )
    return out
