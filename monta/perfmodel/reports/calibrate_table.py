"""What ``monta calibrate`` did, said in tables: the records' fit (each record measured against fitted), the
closing table of every link the model prices (fitted, scaled by the records, or the base's figure kept,
and why) and the fits whose error passes the limit. Imports no torch."""

from __future__ import annotations

from pathlib import Path

from monta.perfmodel.network.nccl_fit import MODEL_OPS

FIT_LIMIT = 0.25  # a fit that misses one of its own measurements by more than this fails (exit 1)
CLASSES = ("intra", "inter")


def _fmt_size(n: float) -> str:
    for unit, div in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= div and n % div == 0:
            return f"{int(n // div)}{unit}"
    return str(int(n))


def records_report(rfit) -> str:
    """Per record: what it timed, measured against the fitted model; then each class's factor."""
    lines = [f"exchange records: {len(rfit.points)} priced ({_left_out(rfit.left_out)})"]
    head = f"{'shape':>10} {'variant':>10} {'size':>6} {'chunks':>6}"
    lines.append(f"{head} {'measured ms':>12} {'fitted ms':>10} {'error':>7}")
    for p, e in zip(rfit.points, rfit.errors):
        shape = f"{p.nodes}x{p.gpus_per_node} TP{p.tp}"
        meas = p.time_us / 1e3
        lines.append(
            f"{shape:>10} {p.variant:>10} {_fmt_size(p.size_bytes):>6} {p.chunks!s:>6} {meas:>12.2f} "
            f"{meas * (1 + e):>10.2f} {100 * e:>+6.1f}%"
        )
    lines.append(f"records MAPE {rfit.mape:.1%}, worst {rfit.worst:.1%} over {len(rfit.points)} records")
    c = rfit.cluster
    lines.append(
        f"fitted rates: intra {c.intra.bandwidth_GBps:.4g} GB/s a GPU ({c.gpus_per_node} a node: "
        f"{c.intra.bandwidth_GBps * c.gpus_per_node * 8:.4g} Gbit/s), inter {c.inter.bandwidth_GBps:.4g} GB/s a NIC "
        f"({c.nics_per_node} a node: {c.inter.bandwidth_GBps * c.nics_per_node * 8:.4g} Gbit/s)"
        + ("" if None not in rfit.scales.values() else "; a class no record depends on keeps the base's")
    )
    return "\n".join(lines)


def _left_out(left: dict[str, int]) -> str:
    return "; ".join(f"left out {n}: {why}" for why, n in left.items()) or "none left out"


def coverage(base, final, cal, rfit, unpriced: dict[str, int]) -> str:
    """Every (collective, link) the model prices: its bandwidth in the base and now, and why it is what it is."""
    lines = [
        "",
        f"what was fitted, and what keeps the figure of {base.name} (GB/s: bandwidth of one link; "
        "a node has the base's NIC count):",
        f"{'collective':>13} {'link':>5} {'base GB/s':>10} {'now GB/s':>10}  how",
    ]
    fits = {(f.op, f.cls): f for f in (cal.fits if cal else [])}
    for op in MODEL_OPS:
        for cls in CLASSES:
            was, now = base.link(cls, op).bandwidth_GBps, final.link(cls, op).bandwidth_GBps
            lines.append(f"{op:>13} {cls:>5} {was:>10.4g} {now:>10.4g}  {_how(fits.get((op, cls)), rfit, cls)}")
    for coll, rows in sorted(unpriced.items()):
        said = f"{rows} rows read and checked; the model prices no {coll}"
        lines.append(f"{coll:>13} {'':>5} {'-':>10} {'-':>10}  {said}")
    return "\n".join(lines)


def _how(fit, rfit, cls: str) -> str:
    if fit is not None and fit.link is not None:
        srcs = sorted({Path(r.source).name for r in fit.residuals})
        how = f"fitted to {len(fit.residuals)} sizes of {', '.join(srcs)}"
    elif fit is not None:
        how = "kept: the other link sets every measured time of its logs"
    else:
        how = "no log measures it"
    scale = rfit.scales.get(cls) if rfit else None
    if scale is not None:
        return f"{how}; rate x{scale:.4g}, fitted to the {len(rfit.points)} exchange records"
    if rfit is not None:
        how += "; no exchange record depends on it"
    return how if how.startswith(("fitted", "kept")) else f"kept: {how}"


def failures(cal, rfit, limit: float = FIT_LIMIT) -> list[str]:
    """One line per fit that misses one of its own measurements by more than ``limit``."""
    out = []
    for fit in cal.fits if cal else []:
        shown = [r for r in fit.residuals if not r.hidden]
        if fit.link is None or not shown:
            continue
        worst = max(shown, key=lambda r: abs(r.error))
        if abs(worst.error) > limit:
            out.append(
                f"monta calibrate: the {fit.op} {fit.cls} fit misses {Path(worst.source).name} at "
                f"{_fmt_size(worst.size_bytes)} by {worst.error:+.0%} (limit {limit:.0%}): the model cannot "
                "follow this log; check it (another algorithm, a degraded link) or leave it out"
            )
    if rfit is not None and rfit.worst > limit:
        i = max(range(len(rfit.errors)), key=lambda k: abs(rfit.errors[k]))
        p = rfit.points[i]
        out.append(
            f"monta calibrate: the records' fit misses {p.where} ({p.variant} at {_fmt_size(p.size_bytes)}, "
            f"chunks {p.chunks}) by {rfit.errors[i]:+.0%} (limit {limit:.0%}): records of another network, or "
            "CPU-bound timings, among them?"
        )
    return out
