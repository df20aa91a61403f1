"""The skew map: the exchange map's routing axis. Per point (layout, routing workload) on the emulator:
the measured winner (worst-rank median) and its margin, the skew model's pick (``monta predict skew``:
worst-rank predictions), the model's error per exchange, the fraction of routes each capacity-based
exchange dropped, and every point where skew changes the winner relative to W0 at the same layout, with
the reason in bytes: the most-loaded link of a token-level exchange against a capacity buffer's fixed
bytes.

``python -m monta_analysis.skew_map --measured R.jsonl [...] --profile linkprofile.json --out DIR``
writes DIR/skew-map.md, DIR/skew-map.png and DIR/skew-points.jsonl.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from monta.dtypes import DTYPE_BYTES
from monta.hardware.profile import LinkProfile
from monta.parallel import ParallelLayout
from monta_analysis import maps
from monta_analysis.maps import TIE, fmt_size, mape, tie

BALANCED = "W0"
POINT = ("tp", "ep", "experts", "topk", "cf", "size_bytes", "routing")  # one point of the skew map (routing last)


@lru_cache(maxsize=256)
def _routing(spec: str, members: int, tokens: int, experts: int, k: int, nodes: int):
    from monta.routing import make_routing

    return make_routing(spec, members, tokens, experts, k, nodes)


def point_routing(rec: dict):
    """The routing the bench built for ``rec``'s point (``monta.bench.routes.point_routing``'s shape:
    T tokens on each of the EP members, ``tokens_per_rank`` of the [E, C, M] buffer's C and the capacity
    factor), rebuilt for the model."""
    from monta.routing.stats import tokens_per_rank

    p, c = rec["params"], rec["config"]
    experts, k, hidden = int(c["experts"]), int(c.get("topk") or 1), int(c["hidden"])
    capacity = int(p["size_bytes"]) // (experts * hidden * DTYPE_BYTES[c["dtype"]])
    spec = p.get("routing") or BALANCED
    tokens = tokens_per_rank(experts, capacity, k, capacity_factor(rec), int(p["tp"]))
    return _routing(spec, int(p.get("ep") or c["ep"]), tokens, experts, k, int(c["nodes"]))


def capacity_factor(rec: dict) -> float:
    """The buffer's capacity factor the bench ran at (absent: 1, the buffer full at W0)."""
    return float(rec["config"].get("capacity_factor") or 1.0)


def _price(rec: dict, profile: LinkProfile):
    from monta.perfmodel.network.skew import skew_price

    p, c = rec["params"], rec["config"]
    layout = ParallelLayout(c["nodes"], c["gpus_per_node"], int(p["tp"]), int(p.get("ep") or c["ep"]))
    cluster = maps.record_cluster(rec, profile)  # a record run on a slower clock (--dilation) is priced on it
    row_bytes = int(c["hidden"]) * DTYPE_BYTES[c["dtype"]]
    return skew_price(
        p["variant"], point_routing(rec), int(p["size_bytes"]), layout, cluster,
        chunks=int(p["chunks"]), cf=capacity_factor(rec), row_bytes=row_bytes,
    )  # fmt: skip


def points(records: list[dict], profile: LinkProfile) -> list[dict]:
    """One row per (point, exchange): measured worst-rank median, the skew model's worst-rank time, the
    routes dropped (measured and predicted), the model's inter-node bytes on the most-loaded link."""
    out = []
    for rec in maps.map_records(records):
        p, m = rec["params"], rec["metrics"]
        price = _price(rec, profile)
        point = {**maps.setup(rec), "cf": capacity_factor(rec), "size_bytes": int(p["size_bytes"]),
                 "routing": p.get("routing") or BALANCED}  # fmt: skip
        model = {
            "predicted_us": price.worst_us,
            "balanced_us": price.balanced_us,
            "capacity_based": not price.dropless,
            "drop_fraction": float(m.get("drop_fraction", 0.0)),  # W0's records: nothing dropped
            "predicted_drop_fraction": price.drop_fraction,
            "maxvio": float(m.get("maxvio", 0.0)),
            "model_inter_bytes": price.inter_bytes,
        }
        out.append(maps.measured_row(point, rec, model))
    return out


def _drops_and_skew(ps: list[dict], meas: list[dict]) -> dict:
    """The point's MaxVio, the routes its winner dropped and every capacity exchange's drops."""
    return {
        "maxvio": max(p["maxvio"] for p in ps),
        "winner_drop": meas[0]["drop_fraction"],
        "drops": {p["variant"]: p["drop_fraction"] for p in ps if p["capacity_based"]},
    }


def winners(pts: list[dict]) -> list[dict]:
    """Per point: the measured winner, its margin over the runner-up, the model's pick, the drops (W0 first
    at each layout)."""
    return maps.winners(pts, POINT, _drops_and_skew, order=lambda key: (key[:-1], key[-1] != BALANCED, key[-1]))


def _describe(p: dict, base: dict) -> str:
    """One exchange at a skewed point next to itself at W0: its bytes and time, its drops."""
    t = p["measured_us"] / base["measured_us"]
    if p["capacity_based"]:
        return (
            f"{p['variant']}'s capacity buffer keeps its bytes ({_mib(p['model_inter_bytes'])} per rank across "
            f"the nodes; time x{t:.2f} of W0) and drops {100 * p['drop_fraction']:.0f}% of the routes"
        )
    grow = p["model_inter_bytes"] / base["model_inter_bytes"] if base["model_inter_bytes"] else 1.0
    what = "its most-loaded link" if grow != 1.0 else "a gather of every token: the same bytes as at W0 on"
    return (
        f"{p['variant']} (dropless) carries {_mib(p['model_inter_bytes'])} on {what} (x{grow:.2f} of W0, model; "
        f"time x{t:.2f} of W0)"
    )


def changes(pts: list[dict], wins: list[dict]) -> list[dict]:
    """Every skewed point whose measured winner differs from W0's at the same layout and size, with why."""
    at = {tuple(p[k] for k in POINT) + (p["variant"],): p for p in pts}
    w0 = {tuple(w[k] for k in POINT[:-1]): w for w in wins if w["routing"] == BALANCED}
    out = []
    for w in wins:
        base = w0.get(tuple(w[k] for k in POINT[:-1]))
        if w["routing"] == BALANCED or base is None or base["measured_winner"] == w["measured_winner"]:
            continue
        old, new = base["measured_winner"], w["measured_winner"]
        here = tuple(w[k] for k in POINT)
        there = tuple(base[k] for k in POINT)
        why = "; ".join(_describe(at[here + (v,)], at[there + (v,)]) for v in (old, new))
        close = min(w["margin"], base["margin"]) < 1 + TIE
        out.append({**w, "w0_winner": old, "why": why, "near_tie": close})
    return out


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _drops(w: dict) -> str:
    """The capacity exchanges' drop fractions: one figure where they agree (they should: one rule)."""
    d = w["drops"]
    if not d:
        return "-"
    if len({round(v, 6) for v in d.values()}) == 1:
        return f"{_pct(next(iter(d.values())))} (all {len(d)})"
    return ", ".join(f"{v} {_pct(x)}" for v, x in d.items())


def summary(pts: list[dict], wins: list[dict]) -> dict:
    """The agreement and the model's error, CPU-bound points left out (the emulator talking)."""
    bound = {tuple(w[k] for k in POINT) for w in wins if w["cpu_bound"]}
    clean_pts = [p for p in pts if tuple(p[k] for k in POINT) not in bound]
    clean = [w for w in wins if not w["cpu_bound"]]
    per = {v: mape([p for p in clean_pts if p["variant"] == v]) for v in dict.fromkeys(p["variant"] for p in pts)}
    clear = [w for w in clean if w["margin"] >= 1 + TIE]
    return {
        "points": len(wins),
        "cpu_bound": len(wins) - len(clean),
        "agree": sum(w["agree"] for w in clean),
        "judged": len(clean),
        "clear_agree": sum(w["agree"] for w in clear),
        "clear": len(clear),
        "mape": mape(clean_pts),
        "mape_per_exchange": per,
    }


def report(pts: list[dict], wins: list[dict], moved: list[dict]) -> str:
    s = summary(pts, wins)
    share = f"{100 * s['agree'] / s['judged']:.0f}%" if s["judged"] else "-"
    err = f"{s['mape']:.1f}%" if s["mape"] is not None else "-"
    lines = [
        "# The skew map",
        "",
        f"Points: {s['points']} (layout x routing), {len(pts)} exchange timings (worst-rank medians); "
        f"{s['cpu_bound']} CPU-bound, left out of the figures that follow. Measured winner = the skew model's "
        f"pick at **{s['agree']} of {s['judged']}** points ({share}); model MAPE on worst-rank times **{err}**. "
        f"Where the winner leads by {100 * TIE:.0f}% or more: {s['clear_agree']} of {s['clear']} agree. "
        f"Skew changes the winner relative to W0 at {len(moved)} point(s).",
        "",
        "| TP | EP | experts | top-k | cf | size | routing | MaxVio | measured winner | by (vs 2nd) | model's pick | "
        "agree | winner drops | capacity exchanges drop | CPU-bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in wins:
        lines.append(
            f"| {w['tp']} | {w['ep']} | {w['experts']} | {w['topk']} | {w['cf']:g} | {fmt_size(w['size_bytes'])} | "
            f"{w['routing']} | "
            f"{w['maxvio']:.2f} | {w['measured_winner']} | {w['margin']:.2f}x{tie(w)} ({w['runner_up']}) | "
            f"{w['model_pick']} | {'yes' if w['agree'] else 'NO'} | {_pct(w['winner_drop'])} | {_drops(w)} | "
            f"{'yes' if w['cpu_bound'] else ''} |"
        )
    lines += ["", "Model error per exchange (MAPE on worst-rank times, CPU-bound points left out):", ""]
    lines += ["| exchange | MAPE |", "|---|---|"]
    lines += [f"| {v} | {'-' if e is None else f'{e:.1f}%'} |" for v, e in s["mape_per_exchange"].items()]
    lines += ["", "## Where skew changes the winner (relative to W0 at the same TP)", ""]
    for c in moved:
        flag = " *(near tie)*" if c["near_tie"] else ""
        flag += " *(CPU-bound)*" if c["cpu_bound"] else ""
        lines.append(
            f"- TP {c['tp']}, {c['routing']} (MaxVio {c['maxvio']:.2f}): {c['w0_winner']} -> "
            f"**{c['measured_winner']}**{flag}. {c['why']}."
        )
    if not moved:
        lines.append("- none: every routing kept W0's winner at every TP.")
    lines += ["", "Per exchange (worst-rank median / skew model, us; drops: measured / model):", ""]
    lines += ["| TP | routing | exchange | measured | p10-p90 | n | predicted | error | dropped | model drops |"]
    lines += ["|---|---|---|---|---|---|---|---|---|---|"]
    for p in pts:
        lines.append(
            f"| {p['tp']} | {p['routing']} | {p['variant']} | {p['measured_us']:.0f} | {p['p10_us']:.0f}-"
            f"{p['p90_us']:.0f} | {p['iters']} | {p['predicted_us']:.0f} | "
            f"{100 * (p['predicted_us'] / p['measured_us'] - 1):+.1f}% | {_pct(p['drop_fraction'])} | "
            f"{_pct(p['predicted_drop_fraction'])} |"
        )
    lines += ["", "![skew map](skew-map.png)", ""]
    return "\n".join(lines)


def _ms(p: dict, at: dict) -> tuple[float, float]:
    return p["measured_us"] / 1e3, p["predicted_us"] / 1e3


def figure(pts: list[dict], path: Path) -> None:
    """Per TP: each exchange's worst-rank time per routing, measured (o) beside the model (x)."""
    maps.panels(
        pts,
        path,
        maps.Panels(
            exchanges=list(dict.fromkeys(p["variant"] for p in pts)),
            case=lambda p: p["routing"],
            value=_ms,
            tick=lambda r: r.replace(":", "\n"),
            title=lambda tp, sub: f"TP {tp}, EP {sub[0]['ep']}: {sub[0]['experts']} experts top-{sub[0]['topk']}",
            ylabel="worst-rank dispatch, ms (o measured, x model)",
            labels=("{}", None),
        ),
    )


def _ordered(records: list[dict], profile: LinkProfile) -> list[dict]:
    """The timings by TP, W0 first, then routing and exchange (the report's and the points file's order)."""
    pts = points(records, profile)
    return sorted(pts, key=lambda p: (p["tp"], p["routing"] != BALANCED, p["routing"], p["variant"]))


def _report(pts: list[dict]) -> str:
    wins = winners(pts)
    return report(pts, wins, changes(pts, wins))


COMMAND = maps.MapCommand(
    name="skew map",
    files=("skew-map.md", "skew-map.png", "skew-points.jsonl"),
    points=_ordered,
    draw=figure,
    report=_report,
    measured_help="bench alltoall records (JSONL), one per routing",
)


def main(argv=None) -> int:
    return maps.main(COMMAND, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
