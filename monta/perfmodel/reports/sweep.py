"""The predicted AllToAll sweep's rows (``monta.perfmodel.network.alltoall.sweep``) in the benchmark's
own columns: a printed table and ``source="predicted"`` records."""

from __future__ import annotations

from typing import Any

from monta.chunking import is_auto
from monta.hardware.links import Cluster

COLUMNS = ("size", "variant", "chunks", "time", "algbw(GB/s)", "busbw(GB/s)", "inter", "intra", "speedup")


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows for a person: sizes and bytes in KiB/MiB/GiB, times in us/ms/s (monta.units); the
    records keep the exact numbers."""
    from monta.units import format_bytes, format_duration

    lines = ["{:>10} {:>10} {:>7} {:>10} {:>12} {:>12} {:>10} {:>10} {:>8}".format(*COLUMNS)]
    for r in rows:
        ch = f"{r['chunks']}" + ("*" if is_auto(r.get("chunks_requested")) else "")
        lines.append(
            f"{format_bytes(r['size_bytes']):>10} {r['variant']:>10} {ch:>7} {format_duration(r['time_us'] / 1e6):>10} "
            f"{r['algbw_GBps']:>12.2f} {r['busbw_GBps']:>12.2f} {format_bytes(r['inter_bytes']):>10} "
            f"{format_bytes(r['intra_bytes']):>10} {r['speedup']:>8.2f}"
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
