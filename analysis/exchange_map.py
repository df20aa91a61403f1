"""The exchange map: per layout (TP, EP), routing (experts, top-k) and buffer size, which token exchange
wins and by how much, measured on the emulator beside the performance model's prediction and pick, and
the model's map of the real cluster it emulates (TP 1-8 on 2 nodes x 8 GPUs).

``python -m monta_analysis.exchange_map --measured R.jsonl [...] --profile linkprofile.json --out DIR``
writes DIR/map.md, DIR/map.png and DIR/map-points.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

from monta import variants as registry  # noqa: E402
from monta.hardware.profile import LinkProfile  # noqa: E402
from monta.parallel import ParallelLayout  # noqa: E402
from monta.perfmodel.network.exchange import exchange_time  # noqa: E402
from monta.perfmodel.network.routed import inter_bytes_formula  # noqa: E402
from monta.perfmodel.reports.accuracy import clock_factor  # noqa: E402
from monta.results import read_records  # noqa: E402
from monta.variants import is_chunked  # noqa: E402

TIE = 0.03  # a winner ahead of the runner-up by less than this is a near tie


def map_exchanges() -> list[str]:
    """The exchanges the map compares: every registered exchange (the core's and each plugin's, in
    registration order) that the model can price (its own ``price`` steps or ``model_as``), except a
    ``full_buffer`` one: that is DeepSpeed before 0.14.5 (``legacy``), which today's deepspeed replaces
    and the map does not race against it. A plugin's exchange appears without a line changed here."""
    return [
        name
        for name, e in registry.exchanges().items()
        if not e.full_buffer and (e.price is not None or e.model_as is not None)
    ]


def why(name: str) -> str:
    """What the exchange does, as its registry entry describes it."""
    return registry.exchange(name).about or "no description registered"


def _key(rec) -> tuple:
    p, c = rec["params"], rec["config"]
    return (int(p["tp"]), int(p.get("ep") or c["ep"]), int(c["experts"]), int(c.get("topk") or 1), int(p["size_bytes"]))


def record_cluster(rec: dict, profile: LinkProfile):
    """The emulated cluster a record ran on: ``profile`` at the record's clock (``clock_factor``), for its
    nodes; ValueError where its links ran at another intra:inter ratio than the profile's."""
    clock = clock_factor(rec, profile)
    if clock is None:
        p = rec["params"]
        raise ValueError(
            f"record {p['variant']} at TP {p.get('tp')} ran at another intra:inter ratio than {profile.name}"
        )
    c = rec["config"]
    return profile.rescaled(clock).cluster(c["nodes"], c["gpus_per_node"])


def points(records: list[dict], profile: LinkProfile) -> list[dict]:
    """One row per (layout, routing, size, exchange): measured median, predicted, bytes, CPU-bound flag."""
    out = []
    exchanges = set(map_exchanges())
    for rec in records:
        if rec.get("kind") != "alltoall" or rec["params"]["variant"] not in exchanges:
            continue
        tp, ep, experts, k, size = _key(rec)
        c = rec["config"]
        layout = ParallelLayout(c["nodes"], c["gpus_per_node"], tp, ep)
        row_bytes = int(c["hidden"]) * (2 if c["dtype"] in ("bfloat16", "float16") else 4)
        v, chunks = rec["params"]["variant"], int(rec["params"]["chunks"])
        b = exchange_time(  # a size rerun on a slower clock (--dilation auto) is priced on it
            v, size, layout, record_cluster(rec, profile), chunks,
            top_k=k, experts=experts, row_bytes=row_bytes,
        )  # fmt: skip
        m = rec["metrics"]
        out.append(
            {
                "tp": tp,
                "ep": ep,
                "experts": experts,
                "topk": k,
                "size_bytes": size,
                "variant": v,
                "chunks": chunks,
                "measured_us": float(m["time_us"]),
                "p10_us": float(m["time_us_p10"]),
                "p90_us": float(m["time_us_p90"]),
                "iters": int(m["iters"]),
                "predicted_us": b.total_us,
                "inter_bytes": m.get("inter_payload_bytes", m["inter_bytes"]),
                "wrong": m.get("wrong"),
                "cpu_bound": bool(m.get("cpu_bound")),
            }
        )
    return out


def winners(pts: list[dict]) -> list[dict]:
    """Per point (layout, routing, size): the measured winner, the model's pick, and the margin."""
    by = defaultdict(list)
    for p in pts:
        by[(p["tp"], p["ep"], p["experts"], p["topk"], p["size_bytes"])].append(p)
    rows = []
    for key, ps in sorted(by.items()):
        meas = sorted(ps, key=lambda p: p["measured_us"])
        pred = sorted(ps, key=lambda p: p["predicted_us"])
        ds = next((p for p in ps if p["variant"] == "deepspeed"), None)
        rows.append(
            {
                "tp": key[0],
                "ep": key[1],
                "experts": key[2],
                "topk": key[3],
                "size_bytes": key[4],
                "measured_winner": meas[0]["variant"],
                "margin": meas[1]["measured_us"] / meas[0]["measured_us"] if len(meas) > 1 else 1.0,
                "vs_deepspeed": ds["measured_us"] / meas[0]["measured_us"] if ds else None,
                # why, in bytes: the winner's inter-node payload over deepspeed's (rank 0)
                "bytes_vs_deepspeed": meas[0]["inter_bytes"] / ds["inter_bytes"] if ds and ds["inter_bytes"] else None,
                "model_pick": pred[0]["variant"],
                "agree": meas[0]["variant"] == pred[0]["variant"],
                "cpu_bound": any(p["cpu_bound"] for p in ps),
            }
        )
    return rows


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


def _fmt_size(n: int) -> str:
    return f"{n // 2**20}M" if n >= 2**20 else f"{n // 1024}K"


def tie(w: dict) -> str:
    return " (near tie)" if w["margin"] < 1 + TIE else ""


def report(pts: list[dict], wins: list[dict], real: list[dict]) -> str:
    ok = [p for p in pts if p["measured_us"] > 0]
    mape = 100 * sum(abs(p["predicted_us"] / p["measured_us"] - 1) for p in ok) / len(ok)
    agree = sum(w["agree"] for w in wins)
    clear = [w for w in wins if w["margin"] >= 1 + TIE]
    lines = [
        "# The exchange map",
        "",
        f"Emulated points: {len(wins)} (layout x routing x size), {len(pts)} exchange timings. "
        f"Measured winner = model's pick at **{agree} of {len(wins)}** points ({100 * agree / len(wins):.0f}%); "
        f"model MAPE over all exchanges **{mape:.1f}%**. Where the winner leads the runner-up by "
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
            f"| {w['tp']} | {w['ep']} | {w['experts']} | {w['topk']} | {_fmt_size(w['size_bytes'])} | "
            f"{w['measured_winner']} | {w['margin']:.2f}x{tie(w)} | {vs} | {by} | {w['model_pick']} | "
            f"{'yes' if w['agree'] else 'NO'} | {'yes' if w['cpu_bound'] else ''} |"
        )
    lines += ["", "Per exchange (measured median / predicted, us; inter-node payload bytes of rank 0):", ""]
    lines += ["| TP | experts | top-k | size | exchange | measured | p10-p90 | n | predicted | error | inter B |"]
    lines += ["|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(pts, key=lambda p: (p["tp"], p["experts"], p["topk"], p["size_bytes"], p["variant"])):
        lines.append(
            f"| {p['tp']} | {p['experts']} | {p['topk']} | {_fmt_size(p['size_bytes'])} | {p['variant']} | "
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
            f"| {r['tp']} | {r['ep']} | {r['experts']} | {r['topk']} | {_fmt_size(r['size_bytes'])} | {r['pick']} | "
            f"{r['vs_deepspeed']:.2f}x | {text} = {value / 2**20:.1f} MiB |"
        )
    lines += ["", "![exchange map](map.png)", ""]
    return "\n".join(lines)


def exchange_colors(exchanges: list[str]) -> dict[str, str]:
    """One colour per exchange, the first five as the map has always drawn them, more from tab10."""
    palette = ["tab:gray", "tab:red", "tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink"]
    palette += ["tab:olive", "tab:cyan"]
    return {v: palette[i % len(palette)] for i, v in enumerate(exchanges)}


def figure(pts: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = sorted({p["tp"] for p in pts})
    fig, axes = plt.subplots(1, len(layouts), figsize=(5 * len(layouts), 4), sharey=True, squeeze=False)
    exchanges = map_exchanges()
    colors = exchange_colors(exchanges)
    for ax, tp in zip(axes[0], layouts):
        sub = [p for p in pts if p["tp"] == tp]
        cases = sorted({(p["experts"], p["topk"], p["size_bytes"]) for p in sub})
        at = {(p["experts"], p["topk"], p["size_bytes"], p["variant"]): p for p in sub}
        base = {c: at[c + ("deepspeed",)]["measured_us"] for c in cases}
        for i, v in enumerate(exchanges):
            xs, meas, pred = [], [], []
            for j, c in enumerate(cases):
                p = at.get(c + (v,))
                if p:
                    xs.append(j + (i - (len(exchanges) - 1) / 2) * 0.12)
                    meas.append(base[c] / p["measured_us"])
                    pred.append(base[c] / p["predicted_us"])
            ax.scatter(xs, meas, color=colors[v], marker="o", label=f"{v} measured")
            ax.scatter(xs, pred, color=colors[v], marker="x", label=f"{v} predicted")
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"E{e} k{k}\n{_fmt_size(s)}" for e, k, s in cases], fontsize=8)
        ax.set_title(f"TP {tp}, EP {sub[0]['ep']} (2 x 4 emulated A800)")
        ax.set_ylabel("speedup over deepspeed (o measured, x model)")
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", nargs="+", required=True, help="bench alltoall records (JSONL)")
    ap.add_argument("--profile", required=True, help="the emulator's calibrated link profile (JSON)")
    ap.add_argument("--out", required=True, help="output folder")
    a = ap.parse_args(argv)
    records = [r for f in a.measured for r in read_records(f)]
    profile = LinkProfile.load(a.profile)
    pts = points(records, profile)
    if not pts:
        print(f"exchange map: no records of {', '.join(map_exchanges())} in {' '.join(a.measured)}", file=sys.stderr)
        return 2
    wins = winners(pts)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    figure(pts, out / "map.png")
    text = report(pts, wins, real_cluster_map())
    (out / "map-points.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pts))
    (out / "map.md").write_text(text + "\n")
    print(text.split("\n")[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
