"""The skeleton both exchange maps share (monta_analysis.exchange_map: layout x routing x size; skew_map: the
routing workload's axis): which exchanges race, a record's point and its measured row, the cluster it ran on,
the winner per point against the model's pick, the figure's panels (one per TP: measured o beside the model's
x) and the command that reads bench records and a link profile and writes the report, figure and points.

A map says only what differs: its point's keys, what it prices a record with, its report and its panels' axes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("MPLBACKEND", "Agg")

from monta import variants as registry  # noqa: E402
from monta.hardware.profile import LinkProfile  # noqa: E402
from monta.perfmodel.reports.accuracy import clock_factor  # noqa: E402
from monta.results import read_records  # noqa: E402

TIE = 0.03  # a winner ahead of the runner-up by less than this is a near tie


def map_exchanges() -> list[str]:
    """The exchanges the maps compare: every registered exchange (the core's and each plugin's, in
    registration order) that the model can price (its own ``price`` steps or ``model_as``), except a
    ``full_buffer`` one: that is DeepSpeed before 0.14.5 (``legacy``), which today's deepspeed replaces
    and the maps do not race against it. A plugin's exchange appears without a line changed here."""
    return [
        name
        for name, e in registry.exchanges().items()
        if not e.full_buffer and (e.price is not None or e.model_as is not None)
    ]


def why(name: str) -> str:
    """What the exchange does, as its registry entry describes it."""
    return registry.exchange(name).about or "no description registered"


def map_records(records: Iterable[dict]) -> list[dict]:
    """The AllToAll records of the exchanges the maps compare."""
    exchanges = set(map_exchanges())
    return [r for r in records if r.get("kind") == "alltoall" and r["params"]["variant"] in exchanges]


def setup(rec: dict) -> dict:
    """The layout and routing a record ran: TP, EP, experts, top-k (absent: 1)."""
    p, c = rec["params"], rec["config"]
    return {"tp": int(p["tp"]), "ep": int(p.get("ep") or c["ep"]), "experts": int(c["experts"]),
            "topk": int(c.get("topk") or 1)}  # fmt: skip


def measured_row(point: dict, rec: dict, model: dict) -> dict:
    """One exchange at one point: the point's keys, the exchange and its chunks, the measured median, its
    p10-p90 and sample count, the map's ``model`` columns, wrong rows and whether the timing was CPU-bound."""
    p, m = rec["params"], rec["metrics"]
    return {
        **point,
        "variant": p["variant"],
        "chunks": int(p["chunks"]),
        "measured_us": float(m["time_us"]),
        "p10_us": float(m["time_us_p10"]),
        "p90_us": float(m["time_us_p90"]),
        "iters": int(m["iters"]),
        **model,
        "wrong": m.get("wrong"),
        "cpu_bound": bool(m.get("cpu_bound")),
    }


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


def winners(pts: list[dict], keys: Sequence[str], more: Callable[[list[dict], list[dict]], dict], order=None):
    """Per point (the values of ``keys``): the measured winner, the runner-up and the margin between them, the
    model's pick and whether the two agree, whether any of its timings was CPU-bound, then the map's own
    columns, ``more(timings, timings by measured time)``. Points in ``order`` of their keys (default: sorted)."""
    by = defaultdict(list)
    for p in pts:
        by[tuple(p[k] for k in keys)].append(p)
    rows = []
    for key in sorted(by, key=order):
        ps = by[key]
        meas = sorted(ps, key=lambda p: p["measured_us"])
        pred = sorted(ps, key=lambda p: p["predicted_us"])
        rows.append(
            {
                **dict(zip(keys, key)),
                "measured_winner": meas[0]["variant"],
                "runner_up": meas[1]["variant"] if len(meas) > 1 else None,
                "margin": meas[1]["measured_us"] / meas[0]["measured_us"] if len(meas) > 1 else 1.0,
                "model_pick": pred[0]["variant"],
                "agree": meas[0]["variant"] == pred[0]["variant"],
                "cpu_bound": any(p["cpu_bound"] for p in ps),
                **more(ps, meas),
            }
        )
    return rows


def tie(w: dict) -> str:
    return " (near tie)" if w["margin"] < 1 + TIE else ""


def mape(pts: list[dict]) -> float | None:
    """The model's mean absolute error over the timings, in percent (None without a positive timing)."""
    ok = [p for p in pts if p["measured_us"] > 0]
    return 100 * sum(abs(p["predicted_us"] / p["measured_us"] - 1) for p in ok) / len(ok) if ok else None


def fmt_size(n: int) -> str:
    return f"{n // 2**20}M" if n >= 2**20 else f"{n // 1024}K"


def exchange_colors(exchanges: list[str]) -> dict[str, str]:
    """One colour per exchange, the first five as the map has always drawn them, more from tab10."""
    palette = ["tab:gray", "tab:red", "tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink"]
    palette += ["tab:olive", "tab:cyan"]
    return {v: palette[i % len(palette)] for i, v in enumerate(exchanges)}


@dataclass(frozen=True)
class Panels:
    """How a map draws its panels (one per TP): the exchanges it shows, in order (one with no timing still gets
    its legend entry), a timing's case on the x axis and the case's tick, the (measured, predicted) values of a
    timing given the panel's timings by (case, exchange), the panel's title from its TP and timings."""

    exchanges: list[str]
    case: Callable[[dict], Any]
    value: Callable[[dict, dict], tuple[float, float]]
    tick: Callable[[Any], str]
    title: Callable[[int, list[dict]], str]
    ylabel: str
    sort_cases: bool = False  # False: cases in the order the timings name them
    sharey: bool = False
    reference: float | None = None  # a horizontal line (1.0: on par with the reference exchange)
    labels: tuple[str, str | None] = ("{} measured", "{} predicted")  # legend entries; None: none


def panels(pts: list[dict], path: Path, how: Panels) -> None:
    """Per case, each exchange's measured value (o) beside the model's (x), side by side; written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tps = sorted({p["tp"] for p in pts})
    colors = exchange_colors(map_exchanges())
    fig, axes = plt.subplots(1, len(tps), figsize=(5 * len(tps), 4), sharey=how.sharey, squeeze=False)
    for ax, tp in zip(axes[0], tps):
        sub = [p for p in pts if p["tp"] == tp]
        cases = sorted(set(map(how.case, sub))) if how.sort_cases else list(dict.fromkeys(map(how.case, sub)))
        at = {(how.case(p), p["variant"]): p for p in sub}
        for i, v in enumerate(how.exchanges):
            mine = [(j, at[c, v]) for j, c in enumerate(cases) if (c, v) in at]
            xs = [j + (i - (len(how.exchanges) - 1) / 2) * 0.12 for j, _ in mine]
            ys = [how.value(p, at) for _, p in mine]
            measured, predicted = how.labels
            ax.scatter(xs, [y for y, _ in ys], color=colors.get(v), marker="o", label=measured.format(v))
            label = predicted.format(v) if predicted else None
            ax.scatter(xs, [y for _, y in ys], color=colors.get(v), marker="x", label=label)
        if how.reference is not None:
            ax.axhline(how.reference, color="k", lw=0.5)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([how.tick(c) for c in cases], fontsize=8)
        ax.set_title(how.title(tp, sub))
        ax.set_ylabel(how.ylabel)
    axes[0][-1].legend(fontsize=7, bbox_to_anchor=(1.02, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


@dataclass(frozen=True)
class MapCommand:
    """A map's command: its name (for errors), its files in DIR (report, figure, points), its timings from the
    records and the profile, its figure and its report from the timings."""

    name: str
    files: tuple[str, str, str]
    points: Callable[[list[dict], LinkProfile], list[dict]]
    draw: Callable[[list[dict], Path], None]
    report: Callable[[list[dict]], str]
    measured_help: str = "bench alltoall records (JSONL)"


def main(command: MapCommand, doc: str, argv=None) -> int:
    """``--measured R.jsonl [...] --profile linkprofile.json --out DIR``: the map's timings, figure and report,
    and the timings as JSONL, written to DIR; exit 2 when the records hold none of the map's exchanges."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--measured", nargs="+", required=True, help=command.measured_help)
    ap.add_argument("--profile", required=True, help="the emulator's calibrated link profile (JSON)")
    ap.add_argument("--out", required=True, help="output folder")
    a = ap.parse_args(argv)
    records = [r for f in a.measured for r in read_records(f)]
    pts = command.points(records, LinkProfile.load(a.profile))
    if not pts:
        print(f"{command.name}: no records of {', '.join(map_exchanges())} in {' '.join(a.measured)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report, figure, points = command.files
    command.draw(pts, out / figure)
    text = command.report(pts)
    (out / points).write_text("".join(json.dumps(p) + "\n" for p in pts))
    (out / report).write_text(text + "\n")
    print(text.split("\n")[2])
    return 0
