"""The records of ``monta bench alltoall`` (rank 0): per size and variant row the timing summary,
bandwidths, bytes per call, the paired speedups and overlap efficiency with their bootstrap CIs, the
host's CPU figures, link delivery and the check's count (schema: ``monta.results``).
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

from monta.bench import chunk_floor
from monta.bench.alltoall.config import AlltoallConfig
from monta.bench.hostload import cores, is_cpu_bound
from monta.bench.stats import (
    alltoall_bw,
    bootstrap,
    median_ratio,
    overlap_efficiency,
    overlap_efficiency_vs_sum,
    summarize,
)
from monta.emulate.shaping import PAYLOAD_SHARE  # payload per frame on the emulated NIC
from monta.results import environment, make_record, new_run_id
from monta.testaids import Slowdown

LINK_SHORTFALL = 0.85  # below this share of the payload ceiling, a link did not deliver its rate
# Only transfers that take this long at the configured rate are judged: shorter ones are bound by
# latency and start skew (and the htb bucket lets its first 4 KiB through unshaped).
LINK_JUDGED_S = 0.02


def net_tuning() -> dict[str, Any]:
    """The emulated testbed's TCP tuning, as the launcher hands it to the ranks."""
    try:
        return json.loads(os.environ.get("MONTA_NET_TUNING") or "{}")
    except ValueError:
        return {}


def link_delivery(layout, topo, time_us, inter, intra, variant) -> dict[str, float] | None:
    """Share of its configured rate the shaped link delivered in this variant's exchange, where the
    exchange is that link alone: legacy and a2a (inter-node NIC), ag (the node's loopback).
    Every rank of a node sends the same bytes, so a node's link carried gpus_per_node x them."""
    if variant in ("legacy", "a2a") and topo.get("inter_gbps") and inter:
        link, rate, nbytes = "inter", topo["inter_gbps"] * 1e9 / 8 * PAYLOAD_SHARE, layout.gpus_per_node * inter
    elif variant == "ag" and topo.get("intra_gbps") and intra:
        link, rate, nbytes = "intra", topo["intra_gbps"] * 1e9 / 8, layout.gpus_per_node * intra
    else:
        return None
    ideal_s = nbytes / rate
    return {
        "link": link,
        "share": ideal_s / (time_us * 1e-6),
        "ideal_ms": 1e3 * ideal_s,
        "judged": ideal_s >= LINK_JUDGED_S,
    }


def _arrays(*lists):
    import numpy as np

    return [np.asarray(x, dtype=float) for x in lists]


def _np_max(a, b):
    import numpy as np

    return np.maximum(a, b)


def _run_env(cfg: AlltoallConfig, transport) -> dict[str, Any]:
    """The records' env: versions and hardware, and how this run's network and backend were set up."""
    env = environment()
    env.update(
        {
            "backend": cfg.backend,
            "emulated": os.environ.get("MONTA_EMULATED") == "1",
            "transport": transport,
            "net_tuning": net_tuning(),
            "cores": cores(),
        }
    )
    return env


def _paired(m: dict, t: list[list[float]], idx: dict, si: int, vi: int, v: str) -> None:
    """Paired per-iteration ratios (same iteration, rotated order) of row ``vi`` at size ``si``: its speedup
    over legacy and deepspeed and, for monta, its overlap efficiency, each with a bootstrap CI."""
    for base in ("legacy", "deepspeed"):
        bi = idx.get((base, 1))
        if bi is not None and bi != vi:
            pt, lo, hi = bootstrap(median_ratio, [t[bi], t[vi]], seed=1000 * si + vi)
            m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"] = pt, [lo, hi]
        elif bi == vi:
            m[f"speedup_vs_{base}"], m[f"speedup_vs_{base}_ci"] = 1.0, [1.0, 1.0]
    parts = [idx.get(k) for k in (("deepspeed", 1), ("a2a", 1), ("ag", 1))]
    if v == "monta" and None not in parts:
        ds, a, g = (t[i] for i in parts)
        pt, lo, hi = bootstrap(overlap_efficiency, [ds, t[vi], a, g], seed=7 + 1000 * si + vi)
        ds_, m_, a_, g_ = _arrays(ds, t[vi], a, g)
        ideal = bootstrap(lambda d, x, y: median_ratio(d, _np_max(x, y)), [ds, a, g], seed=si)
        m.update(
            overlap_efficiency=pt,
            overlap_efficiency_ci=[lo, hi],
            ideal_vs_deepspeed=ideal[0],
            ideal_vs_deepspeed_ci=[ideal[1], ideal[2]],
            # context: deepspeed against its two halves run alone (< 1: it overlaps a little
            # by itself), and the efficiency by the earlier (t_a2a + t_ag) / max ideal
            deepspeed_vs_halves=float(median_ratio(ds_, a_ + g_)),
            overlap_efficiency_vs_sum=float(overlap_efficiency_vs_sum(ds_, m_, a_, g_)),
        )


def _spans(m: dict, spans: list[list[float]], idx: dict, si: int, vi: int) -> None:
    """Row ``vi``'s times from the first rank's start to the last one's end (ranks on one host's clock:
    ``runner.Timings.span_times``) and its paired speedup over legacy by them, beside the slowest rank's own."""
    if not spans[vi]:
        return
    m["span_samples_us"], m["span_us"] = spans[vi], float(statistics.median(spans[vi]))
    bi = idx.get(("legacy", 1))
    if bi is not None and bi != vi and spans[bi]:
        pt, lo, hi = bootstrap(median_ratio, [spans[bi], spans[vi]], seed=1000 * si + vi)
        m["span_speedup_vs_legacy"], m["span_speedup_vs_legacy_ci"] = pt, [lo, hi]


def _row_metrics(cfg: AlltoallConfig, layout, tm, si: int, vi: int, times_us: list[float], wrong, load) -> dict:
    """Row ``vi`` at size ``si``: its timing summary, bandwidths, bytes per call, CPU time and check count."""
    m = summarize(times_us)
    algbw, busbw = alltoall_bw(cfg.sizes[si], m["time_us"], layout.ep)
    inter, intra = tm.bytes_per_call[(si, vi)]
    m.update(
        samples_us=times_us,
        iters=len(times_us),
        stop=tm.stop_note[si],
        algbw_GBps=algbw,
        busbw_GBps=busbw,
        inter_bytes=inter,
        intra_bytes=intra,
        wrong=int(wrong[si, vi]),
        cpu_us=statistics.median(tm.cpu[si][vi]) * 1e6,
        checked=bool(cfg.aids.check),
        host_cpu=load,
        cpu_bound=is_cpu_bound(load),
    )
    return m


def _params(cfg: AlltoallConfig, layout, topo: dict, size: int, v: str, c: int) -> dict[str, Any]:
    return {
        "size_bytes": size,
        "variant": v,
        "chunks": c,
        "nodes": layout.nodes,
        "gpus_per_node": layout.gpus_per_node,
        "tp": layout.tp,
        "ep": layout.ep,
        "dtype": cfg.dtype,
        "experts": cfg.experts,
        "hidden": cfg.hidden,
        "topology": topo.get("name"),
        "inter_gbps": topo.get("inter_gbps"),
        "intra_gbps": topo.get("intra_gbps"),
        # what was timed: absent = the dispatch alone (records of before --mode), "layer" = the MoE layer
        **({"mode": cfg.mode} if cfg.mode != "dispatch" else {}),
        # the buffer's capacity factor: absent = 1 (the buffer full at W0; records of before the flag)
        **({"capacity_factor": cfg.capacity_factor} if cfg.capacity_factor != 1.0 else {}),
    }


def build_records(cfg: AlltoallConfig, layout, variants, tm, wrong, host, transport, slowdown: Slowdown) -> list[dict]:
    """One record per size and variant row from the timed loop's ``tm`` (``runner.Timings``),
    the check's ``wrong`` counts and ``host`` (per size and row: the host-load window's figures)."""
    run_id = new_run_id()
    env = _run_env(cfg, transport)
    source = "emulated" if os.environ.get("MONTA_EMULATED") == "1" else "measured"
    topo = cfg.topology or {}
    config = cfg.to_dict()
    idx = {vc: i for i, vc in enumerate(variants)}
    records = []
    for si, size in enumerate(cfg.sizes):
        t = [[x * 1e6 for x in tm.times[si][vi]] for vi in range(len(variants))]
        spans = [[x * 1e6 for x in tm.span_times[si][vi]] for vi in range(len(variants))]
        left_out = chunk_floor.not_run(cfg.min_chunk, cfg.variants, size, variants)
        for vi, (v, c) in enumerate(variants):
            if not chunk_floor.runs(cfg.min_chunk, cfg.variants, size, v, c):
                continue
            m = _row_metrics(cfg, layout, tm, si, vi, t[vi], wrong, host[si][vi])
            if left_out:
                m["not_run"] = left_out
            link = link_delivery(layout, topo, m["time_us"], m["inter_bytes"], m["intra_bytes"], v)
            if link:
                m["link_delivery"] = link
            _paired(m, t, idx, si, vi, v)
            _spans(m, spans, idx, si, vi)
            if slowdown.applies(v):
                m["injected_slowdown"] = slowdown.fraction  # TEST AID: this variant was slowed on purpose
                # ... and what it took before its delay, so a gate check can tell the injection from a
                # run that moved by itself (monta regress shows it)
                own = [x * 1e6 for x in tm.clean[si][vi]]
                if own:
                    m["samples_clean_us"], m["time_clean_us"] = own, float(statistics.median(own))
            records.append(
                make_record(
                    kind="alltoall",
                    source=source,
                    experiment=cfg.experiment,
                    params=_params(cfg, layout, topo, size, v, c),
                    metrics=m,
                    config=config,
                    env=env,
                    run_id=run_id,
                )
            )
    return records
