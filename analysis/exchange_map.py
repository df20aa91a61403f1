"""The exchange map: per layout (TP, EP), routing (experts, top-k) and buffer size, which token exchange
wins and by how much, measured on the emulator beside the performance model's prediction and pick, and
the model's map of the real cluster it emulates (TP 1-8 on 2 nodes x 8 GPUs).

``python -m monta_analysis.exchange_map --measured R.jsonl [...] --profile linkprofile.json --out DIR``
writes DIR/map.md, DIR/map.png and DIR/map-points.jsonl.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from monta.hardware.profile import LinkProfile
from monta.parallel import ParallelLayout
from monta.perfmodel.network.exchange import exchange_time
from monta.perfmodel.network.routed import inter_bytes_formula
from monta.variants import is_chunked
from monta_analysis import maps
from monta_analysis.maps import TIE, fmt_size, map_exchanges, tie, why

POINT = ("tp", "ep", "experts", "topk", "size_bytes")  # one point of the map


def points(records: list[dict], profile: LinkProfile) -> list[dict]:
    """One row per (layout, routing, size, exchange): measured median, predicted, bytes, CPU-bound flag."""
    out = []
    for rec in maps.map_records(records):
        point = {**maps.setup(rec), "size_bytes": int(rec["params"]["size_bytes"])}
        c = rec["config"]
        layout = ParallelLayout(c["nodes"], c["gpus_per_node"], point["tp"], point["ep"])
        row_bytes = int(c["hidden"]) * (2 if c["dtype"] in ("bfloat16", "float16") else 4)
        b = exchange_time(  # a size rerun on a slower clock (--dilation auto) is priced on it
            rec["params"]["variant"], point["size_bytes"], layout, maps.record_cluster(rec, profile),
            int(rec["params"]["chunks"]), top_k=point["topk"], experts=point["experts"], row_bytes=row_bytes,
        )  # fmt: skip
        m = rec["metrics"]
        model = {"predicted_us": b.total_us, "inter_bytes": m.get("inter_payload_bytes", m["inter_bytes"])}
        out.append(maps.measured_row(point, rec, model))
    return out


def _against_deepspeed(ps: list[dict], meas: list[dict]) -> dict:
    """The winner against deepspeed at its point: time, and why in bytes (inter-node payload, rank 0)."""
    ds = next((p for p in ps if p["variant"] == "deepspeed"), None)
    return {
        "vs_deepspeed": ds["measured_us"] / meas[0]["measured_us"] if ds else None,
        "bytes_vs_deepspeed": meas[0]["inter_bytes"] / ds["inter_bytes"] if ds and ds["inter_bytes"] else None,
    }


def winners(pts: list[dict]) -> list[dict]:
    """Per point (layout, routing, size): the measured winner, the model's pick, and the margin."""
    return maps.winners(pts, POINT, _against_deepspeed)


def real_cluster_map(cluster: str = "a800-4nic", sizes=(16 * 2**20, 256 * 2**20)) -> list[dict]:
    """The model's map of the real cluster: 2 nodes x 8 GPUs, TP 1/2/4/8, bf16, hidden 4096."""
    rows = []
    for tp in (1, 2, 4, 8):
        layout = ParallelLayout(2, 8, tp, 16 // tp)
        for experts, k in ((16 // tp, 1), (16, 2), (64, 8)):
            experts = max(experts, layout.ep)
            if k > experts:
                continue
            for size in sizes:
                t = {
                    v: exchange_time(
                        v, size, layout, cluster, 8 if is_chunked(v) else 1, top_k=k, experts=experts, row_bytes=8192
                    ).total_us
                    for v in map_exchanges()
                }
                best = min(t, key=t.get)
                rows.append(
                    {
                        "tp": tp,
                        "ep": layout.ep,
                        "experts": experts,
                        "topk": k,
                        "size_bytes": size,
                        "pick": best,
                        "vs_deepspeed": t["deepspeed"] / t[best],
                        "times_us": t,
                    }  # fmt: skip
                )
    return rows


def report(pts: list[dict], wins: list[dict], real: list[dict]) -> str:
    err = maps.mape(pts)
    err = "-" if err is None else f"{err:.1f}%"
    agree = sum(w["agree"] for w in wins)
    clear = [w for w in wins if w["margin"] >= 1 + TIE]
    lines = [
        "# The exchange map",
        "",
        f"Emulated points: {len(wins)} (layout x routing x size), {len(pts)} exchange timings. "
        f"Measured winner = model's pick at **{agree} of {len(wins)}** points ({100 * agree / len(wins):.0f}%); "
        f"model MAPE over all exchanges **{err}**. Where the winner leads the runner-up by "
        f"{100 * TIE:.0f}% or more: {sum(w['agree'] for w in clear)} of {len(clear)} agree (closer ones are "
        "marked *near tie*: the order of the two is within the run-to-run spread).",
        "",
        "| TP | EP | experts | top-k | size | measured winner | by (vs 2nd) | vs deepspeed | its inter-node bytes "
        "/ deepspeed's | model's pick | agree | CPU-bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in wins:
        vs = f"{w['vs_deepspeed']:.2f}x" if w["vs_deepspeed"] else "-"
        by = f"{w['bytes_vs_deepspeed']:.2f}" if w.get("bytes_vs_deepspeed") is not None else "-"
        lines.append(
            f"| {w['tp']} | {w['ep']} | {w['experts']} | {w['topk']} | {fmt_size(w['size_bytes'])} | "
            f"{w['measured_winner']} | {w['margin']:.2f}x{tie(w)} | {vs} | {by} | {w['model_pick']} | "
            f"{'yes' if w['agree'] else 'NO'} | {'yes' if w['cpu_bound'] else ''} |"
        )
    lines += ["", "Per exchange (measured median / predicted, us; inter-node payload bytes of rank 0):", ""]
    lines += ["| TP | experts | top-k | size | exchange | measured | p10-p90 | n | predicted | error | inter B |"]
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(pts, key=lambda p: (p["tp"], p["experts"], p["topk"], p["size_bytes"], p["variant"])):
        lines.append(
            f"| {p['tp']} | {p['experts']} | {p['topk']} | {fmt_size(p['size_bytes'])} | {p['variant']} | "
            f"{p['measured_us']:.0f} | {p['p10_us']:.0f}-{p['p90_us']:.0f} | {p['iters']} | {p['predicted_us']:.0f} | "
            f"{100 * (p['predicted_us'] / p['measured_us'] - 1):+.1f}% | {p['inter_bytes']} |"
        )
    bound = sum(w["cpu_bound"] for w in wins)
    if bound:
        lines += [
            "",
            f"CPU-BOUND: {bound} of {len(wins)} points had an exchange whose timing was limited by this machine's "
            "cores (the emulator talking, not the method).",
        ]
    lines += ["", "## Where each exchange wins, and why", ""]
    counts = defaultdict(int)
    for w in wins:
        counts[w["measured_winner"]] += 1
    for v in map_exchanges():
        if counts[v]:
            lines.append(f"- **{v}** wins {counts[v]} of {len(wins)} emulated points: {why(v)}.")
    lines += ["", "## The model's map of the real cluster (a800-4nic, 2 x 8 GPUs, bf16, hidden 4096)", ""]
    lines += ["| TP | EP | experts | top-k | size | pick | vs deepspeed | inter-node bytes per rank (formula) |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for r in real:
        layout = ParallelLayout(2, 8, r["tp"], r["ep"])
        text, value = inter_bytes_formula(r["pick"], r["size_bytes"], layout, top_k=r["topk"], experts=r["experts"])
        lines.append(
            f"| {r['tp']} | {r['ep']} | {r['experts']} | {r['topk']} | {fmt_size(r['size_bytes'])} | {r['pick']} | "
            f"{r['vs_deepspeed']:.2f}x | {text} = {value / 2**20:.1f} MiB |"
        )
    lines += ["", "![exchange map](map.png)", ""]
    return "\n".join(lines)


def _speedup(p: dict, at: dict) -> tuple[float, float]:
    """A timing's speedup over deepspeed's measured time at its case: measured, and the model's."""
    base = at[(p["experts"], p["topk"], p["size_bytes"]), "deepspeed"]["measured_us"]
    return base / p["measured_us"], base / p["predicted_us"]


def figure(pts: list[dict], path: Path) -> None:
    maps.panels(
        pts,
        path,
        maps.Panels(
            exchanges=map_exchanges(),
            case=lambda p: (p["experts"], p["topk"], p["size_bytes"]),
            value=_speedup,
            tick=lambda c: f"E{c[0]} k{c[1]}\n{fmt_size(c[2])}",
            title=lambda tp, sub: f"TP {tp}, EP {sub[0]['ep']} (2 x 4 emulated A800)",
            ylabel="speedup over deepspeed (o measured, x model)",
            sort_cases=True,
            sharey=True,
            reference=1.0,
        ),
    )


COMMAND = maps.MapCommand(
    name="exchange map",
    files=("map.md", "map.png", "map-points.jsonl"),
    points=points,
    draw=figure,
    report=lambda pts: report(pts, winners(pts), real_cluster_map()),
)


def main(argv=None) -> int:
    return maps.main(COMMAND, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
