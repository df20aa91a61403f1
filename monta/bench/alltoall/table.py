"""What ``monta bench alltoall`` prints (rank 0): the header (versions, layout, network, knobs, ranks),
the nccl-tests-style table of its records, and the footer: per size the summary row (``summary_rows``:
monta's best chunk count against legacy and deepspeed, overlap efficiency, bounds, link delivery, the
host's CPU verdict), the check's count and the average bus bandwidth.
"""

from __future__ import annotations

from typing import Any

import torch

from monta.bench import chunk_floor
from monta.bench.adaptive import row_label
from monta.bench.alltoall.config import AlltoallConfig
from monta.bench.alltoall.records import LINK_SHORTFALL, net_tuning
from monta.bench.hostload import is_cpu_bound, verdict
from monta.chunking import pipeline_bound
from monta.dtypes import DTYPE_BYTES
from monta.results import environment
from monta.units import format_bytes, format_duration


def print_header(cfg: AlltoallConfig, layout, hosts, transport) -> None:
    env = environment()
    print(
        f"# monta bench alltoall  (monta {env['monta']}, torch {torch.__version__}, python {env['python']}, "
        f"commit {env.get('git_commit')})"
    )
    print(f"# layout: {layout.describe()}; backend {cfg.backend}, transport {transport}")
    topo = cfg.topology or {}
    tuning = net_tuning()
    tun = (
        f"; tcp {tuning.get('tcp_cc')}, quickack {'on' if tuning.get('quickack') else 'off'}, "
        f"slow start after idle {'off' if tuning.get('slow_start_after_idle') is False else 'on'}"
        if tuning
        else ""
    )
    print(f"# network: {topo.get('description', 'unshaped')}{tun}")
    d = cfg.to_dict()
    knobs = {
        k: d[k]
        for k in (
            "sizes",
            "variants",
            "chunks",
            "dtype",
            "experts",
            "hidden",
            "warmup",
            "iters",
            "adaptive",
            "max_iters",
            "target_ci",
            "budget_s",
            "check",
        )
    }
    knobs["mode"] = cfg.mode
    print("# " + " ".join(f"{k}={v}" for k, v in knobs.items()))
    if cfg.aids.inject_slowdown:
        sd = cfg.aids.inject_slowdown
        print(
            f"# TEST AID: --inject-slowdown slows {sd['variant']} by {100 * sd['fraction']:g}% on purpose "
            "(a measured delay after each call); its records say injected_slowdown"
        )
    if cfg.mode == "layer":
        print(
            "# mode layer: time = the MoE layer's forward+backward around the exchange (encode, dispatch, "
            f"a per-expert FFN {cfg.hidden} -> {cfg.hidden} -> {cfg.hidden}, combine, decode, and their backward); "
            "inter/intra = bytes of all four passes"
        )
    print("# size = one rank's [E, C, M] dispatch buffer; algbw = size / time; busbw = algbw * (EP-1)/EP;")
    print("# time = median over iterations of the slowest rank; inter/intra = bytes this rank sent per call;")
    print("# a2a / ag rows = the drop-side AllToAll and the AllGather alone (the halves monta overlaps);")
    if cfg.adaptive:
        print(
            "# iterations (--adaptive): at least --iters, then more until every paired ratio's 95% CI is within "
            "--target-ci (or --max-iters / --budget-s)"
        )
    else:
        print("# iterations: exactly --iters (--adaptive repeats until the paired ratios' CIs are narrow)")
    for h in hosts:
        print(
            f"#   rank {h['rank']:3d}  node {h['node']}  host {h['host']}  addr {h['addr']}  "
            f"pid {h['pid']}  {h['device']}"
        )


def print_table(records) -> None:
    """One row per size and variant, nccl-tests style, sizes and times in human units (records keep bytes, us)."""
    from tabulate import tabulate

    us = lambda x: format_duration(x / 1e6)  # noqa: E731
    headers = (
        "size", "variant", "chunks", "time", "p10", "p90", "n", "algbw(GB/s)", "busbw(GB/s)", "inter", "intra",
        "cpu", "#wrong", "vs legacy [95% CI]",
    )  # fmt: skip
    rows = []
    for rec in records:
        p, m = rec["params"], rec["metrics"]
        rows.append(
            [
                format_bytes(p["size_bytes"]),
                p["variant"],
                p["chunks"],
                us(m["time_us"]),
                us(m["time_us_p10"]),
                us(m["time_us_p90"]),
                m["iters"],
                f"{m['algbw_GBps']:.3f}",
                f"{m['busbw_GBps']:.3f}",
                format_bytes(m["inter_bytes"]),
                format_bytes(m["intra_bytes"]),
                us(m["cpu_us"]),
                m["wrong"] if m["checked"] else "N/A",
                fmt_ci(m.get("speedup_vs_legacy"), m.get("speedup_vs_legacy_ci")),
            ]
        )
    # every cell already formatted: tabulate aligns them and parses none as a number
    print(tabulate(rows, headers, tablefmt="plain", stralign="right", disable_numparse=True))
    print_footer(records)
    print_formulas(records)


def print_formulas(records) -> None:
    """Inter-node payload per dispatch beside each exchange's byte formula (rank 0's routing)."""
    rows = [r for r in records if "inter_formula" in r["metrics"]]
    if not rows:
        return
    print(
        "# inter-node bytes per dispatch, rank 0 (B = E C M bytes of the buffer, b = M bytes of a token, "
        "T tokens, P EP ranks, L per node): formula = value | measured payload (+ routing metadata)"
    )
    for r in rows:
        p, m = r["params"], r["metrics"]
        ok = "OK" if m["inter_formula_bytes"] == m["inter_payload_bytes"] else "MISMATCH"
        print(
            f"#   {format_bytes(p['size_bytes']):>8} {p['variant']:>10}: {m['inter_formula']:<24} = "
            f"{m['inter_formula_bytes']:>10} | {m['inter_payload_bytes']:>10} (+ {m['inter_meta_bytes']}) {ok}"
        )


def fmt_ci(point, ci) -> str:
    if point is None:
        return "-"
    if not ci or ci[0] != ci[0]:
        return f"{point:.3f}"
    return f"{point:.3f} [{ci[0]:.3f},{ci[1]:.3f}]"


def _capacity_slice(params: dict, chunks: int) -> int | None:
    """The capacity slots one TP rank's chunks were cut from (C / TP of the [E, C, M] buffer), so the bound
    is that of the exact split; None where the record does not say (the split's shares then)."""
    try:
        row = int(params["experts"]) * int(params["hidden"]) * DTYPE_BYTES[params["dtype"]]
        cap = int(params["size_bytes"]) // row // int(params["tp"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return cap if cap >= chunks else None


def summary_rows(records) -> list[dict[str, Any]]:
    """Per size: monta (best chunks) vs legacy and deepspeed as paired ratios with their CIs, the
    overlap efficiency with its CI, the byte bound, link delivery and the host CPU verdict."""
    by_size: dict[int, dict[tuple[str, int], dict]] = {}
    for rec in records:
        by_size.setdefault(rec["params"]["size_bytes"], {})[(rec["params"]["variant"], rec["params"]["chunks"])] = rec
    out = []
    for size, vs in sorted(by_size.items()):
        monta = {c: rec for (v, c), rec in vs.items() if v == "monta"}
        if not monta:
            continue
        best_c = min(monta, key=lambda c: monta[c]["metrics"]["time_us"])
        m = monta[best_c]["metrics"]
        p = monta[best_c]["params"]
        row: dict[str, Any] = {
            "size_bytes": size,
            "best_chunks": best_c,
            "t_monta": m["time_us"],
            "iters": m["iters"],
            "stop": m.get("stop"),
            "tp": p["tp"],
        }
        for base in ("legacy", "deepspeed"):
            if f"speedup_vs_{base}" in m and (base, 1) in vs:
                row[f"vs_{base}"], row[f"vs_{base}_ci"] = m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"]
        if "overlap_efficiency" in m:
            row.update(
                ideal_vs_deepspeed=m["ideal_vs_deepspeed"],
                ideal_vs_deepspeed_ci=m["ideal_vs_deepspeed_ci"],
                overlap_efficiency=m["overlap_efficiency"],
                overlap_efficiency_ci=m["overlap_efficiency_ci"],
                deepspeed_vs_halves=m.get("deepspeed_vs_halves"),
            )
        # The byte bound: monta moves TP times fewer inter-node bytes than legacy, so on a link-bound
        # testbed its speedup over legacy cannot exceed TP (5% slack for measurement noise).
        if "vs_legacy" in row:
            row["byte_bound"] = p["tp"]
            lo = row["vs_legacy_ci"][0]
            row["above_bound"] = bool(lo == lo and lo > 1.05 * p["tp"])
        if ("a2a", 1) in vs and ("ag", 1) in vs:
            # r = AllGather alone / AllToAll alone; k pipelined chunks of MoNTA's split gain at most
            # TP / pipeline_span over legacy: the bound of the whole exchange, not only its bytes.
            r = vs[("ag", 1)]["metrics"]["time_us"] / vs[("a2a", 1)]["metrics"]["time_us"]
            row["ag_over_a2a"] = r
            row["pipeline_bound"] = pipeline_bound(p["tp"], r, best_c, _capacity_slice(p, best_c))
            if "vs_legacy" in row:  # how close the k-chunk pipeline came to its own bound
                row["of_pipeline_bound"] = row["vs_legacy"] / row["pipeline_bound"]
        row.update(_span_fields(m, vs))
        loads = [rec["metrics"].get("host_cpu") for rec in vs.values()]
        row["host_cpu"] = _merge_loads(loads)
        # The size's ratios are CPU-bound when a variant they are computed from was (legacy,
        # deepspeed, the best monta, the two halves); other chunk counts are named, not counted.
        reported = {("legacy", 1), ("deepspeed", 1), ("monta", best_c), ("a2a", 1), ("ag", 1)}
        bound = {vc: rec for vc, rec in vs.items() if is_cpu_bound(rec["metrics"].get("host_cpu"))}
        row["cpu_bound_variants"] = [_wait_label(vc, rec) for vc, rec in bound.items() if vc in reported]
        row["cpu_bound_others"] = [_wait_label(vc, rec) for vc, rec in bound.items() if vc not in reported]
        row["cpu_bound"] = bool(row["cpu_bound_variants"])
        shortfall = [
            f"{rec['params']['variant']} {100 * rec['metrics']['link_delivery']['share']:.0f}% of its "
            f"{rec['metrics']['link_delivery']['link']} link"
            for rec in vs.values()
            if rec["metrics"].get("link_delivery")
            and rec["metrics"]["link_delivery"].get("judged", True)
            and rec["metrics"]["link_delivery"]["share"] < LINK_SHORTFALL
        ]
        row["link_shortfall"] = shortfall
        row["links"] = {
            rec["params"]["variant"]: rec["metrics"]["link_delivery"]
            for rec in vs.values()
            if rec["metrics"].get("link_delivery")
        }
        out.append(row)
    return out


def _span_fields(m: dict, vs: dict) -> dict[str, Any]:
    """Ranks on one host's clock: MoNTA's and the AllToAll alone's ratio over legacy from the first rank's start
    to the last one's end (``span_speedup_vs_legacy``), beside the slowest rank's own time."""
    out: dict[str, Any] = {}
    if "span_speedup_vs_legacy" in m:
        out["span_vs_legacy"], out["span_vs_legacy_ci"] = m["span_speedup_vs_legacy"], m["span_speedup_vs_legacy_ci"]
        a2a = vs.get(("a2a", 1), {}).get("metrics", {})
        if "span_speedup_vs_legacy" in a2a:
            out["span_a2a_vs_legacy"] = a2a["span_speedup_vs_legacy"]
            out["span_a2a_vs_legacy_ci"] = a2a["span_speedup_vs_legacy_ci"]
    return out


def _span_line(row: dict[str, Any]) -> str:
    a2a = (
        f", the AllToAll alone {fmt_ci(row['span_a2a_vs_legacy'], row['span_a2a_vs_legacy_ci'])}"
        if "span_a2a_vs_legacy" in row
        else ""
    )
    return (
        "#        from the first rank's start to the last one's end (one host clock): vs legacy "
        f"{fmt_ci(row['span_vs_legacy'], row['span_vs_legacy_ci'])}{a2a}"
    )


def _wait_label(vc, rec) -> str:
    wait = (rec["metrics"].get("host_cpu") or {}).get("rank_wait")
    return row_label(*vc) + (f" ({100 * wait:.0f}%)" if wait is not None else "")


def _merge_loads(loads) -> dict[str, float] | None:
    """Time-weighted mean of several windows' CPU figures."""
    loads = [x for x in loads if x and x.get("busy") is not None and x.get("sampled_s")]
    if not loads:
        return None
    w = sum(x["sampled_s"] for x in loads)
    out = {k: sum(x[k] * x["sampled_s"] for x in loads) / w for k in ("busy", "saturated")}
    waits = [x for x in loads if x.get("rank_wait") is not None]
    out["rank_wait"] = sum(x["rank_wait"] * x["sampled_s"] for x in waits) / w if len(waits) == len(loads) else None
    psi = [x for x in loads if x.get("psi_some") is not None]
    out["psi_some"] = sum(x["psi_some"] * x["sampled_s"] for x in psi) / w if len(psi) == len(loads) else None
    out["sampled_s"] = w
    return out


def _print_injected(records) -> None:
    injected = {
        r["params"]["variant"]: r["metrics"]["injected_slowdown"]
        for r in records
        if r["metrics"].get("injected_slowdown")
    }
    for v, f in injected.items():
        print(f"# TEST AID: {v} was slowed by {100 * f:g}% on purpose (--inject-slowdown)")


def print_footer(records) -> None:
    rows = summary_rows(records)
    if not rows:
        return
    print(
        "# summary per size: monta (best chunks) speedup vs legacy and vs deepspeed = median of the paired "
        "per-iteration ratios [95% bootstrap CI over iterations];"
    )
    print(
        "# ideal = t_deepspeed / max(t_a2a, t_ag), the gain of a perfect overlap; overlap efficiency = (gain - 1) / "
        "(ideal - 1), the share of it achieved; bound = TP (legacy sends TP x the inter-node bytes)"
    )
    for row in rows:
        parts = [f"{format_bytes(row['size_bytes']):>8}", f"chunks {row['best_chunks']}", f"n={row['iters']}"]
        if "vs_legacy" in row:
            flag = "  ABOVE THE BYTE BOUND: a testbed problem" if row["above_bound"] else ""
            pipe = (
                f", pipeline {row['pipeline_bound']:.2f} at ag/a2a {row['ag_over_a2a']:.2f}: "
                f"{100 * row['of_pipeline_bound']:.0f}% of it"
                if "of_pipeline_bound" in row
                else ""
            )
            parts.append(
                f"vs legacy {fmt_ci(row['vs_legacy'], row['vs_legacy_ci'])} (bound {row['byte_bound']}{pipe}){flag}"
            )
        if "vs_deepspeed" in row:
            parts.append(f"vs deepspeed {fmt_ci(row['vs_deepspeed'], row['vs_deepspeed_ci'])}")
        if "overlap_efficiency" in row:
            lo, hi = row["overlap_efficiency_ci"]
            ci = f" [{100 * lo:.0f}%, {100 * hi:.0f}%]" if lo == lo else ""
            halves = row.get("deepspeed_vs_halves")
            sums = f" (deepspeed = {halves:.2f} x (a2a + ag))" if halves is not None else ""
            parts.append(
                f"ideal {row['ideal_vs_deepspeed']:.2f}x efficiency {100 * row['overlap_efficiency']:.0f}%{ci}{sums}"
            )
        print("# " + "  ".join(parts))
        if "span_vs_legacy" in row:
            print(_span_line(row))
        links = ", ".join(
            f"{v} {100 * d['share']:.0f}% ({d['link']})" for v, d in row["links"].items() if d.get("judged", True)
        )
        if links:
            print(f"#        links delivered (of the payload rate): {links}")
        if row["link_shortfall"]:
            print(
                f"#        LINK SHORTFALL: {'; '.join(row['link_shortfall'])} (below {100 * LINK_SHORTFALL:.0f}%): "
                "the emulator, not the method"
            )
        line = verdict(row["host_cpu"])
        if row["cpu_bound_variants"]:
            line = (
                f"CPU-BOUND: {', '.join(row['cpu_bound_variants'])} over the limit; all variants: "
                + line.split(": ", 1)[1]
            )
        elif line.startswith("CPU-BOUND"):  # the average says bound, no reported variant does
            line = "CPU: reported variants not bound; all variants: " + line.split(": ", 1)[1]
        print(f"#        {line}")
        if row["cpu_bound_others"]:
            print(
                f"#        CPU-bound (not in the ratios above): {', '.join(row['cpu_bound_others'])}: their times "
                "measure this machine's cores"
            )
    n_bound = sum(r["cpu_bound"] for r in rows)
    if n_bound:
        print(
            f"# CPU-BOUND: {n_bound} of {len(rows)} sizes had timings limited by this machine's cores (see above); "
            "their ratios are the emulator talking, not the method"
        )
    for line in filter(None, [chunk_floor.footer(records)]):  # the rows --min-chunk left out
        print(line)
    _print_injected(records)
    n_wrong = sum(r["metrics"]["wrong"] for r in records)
    checked = all(r["metrics"]["checked"] for r in records)
    print(f"# Out of bounds values : {n_wrong if checked else 'N/A'} {'OK' if checked and n_wrong == 0 else ''}")
    busbw = [r["metrics"]["busbw_GBps"] for r in records if r["params"]["variant"] not in ("a2a", "ag")]
    print(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f} GB/s")
