"""``monta predict paper``: the model's figures for the paper's two headline setups (TP8 AllToAll on
2 x 8 A800; 2x70B/8K step on 16 A800), next to the published 8x and 13%, assumptions printed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from monta.hardware.profile import get_cluster
from monta.model.config import resolve_config
from monta.perfmodel.network.alltoall import make_layout, sweep
from monta.perfmodel.training import contention as K
from monta.perfmodel.training.memory import GB, memory_per_rank
from monta.perfmodel.training.step import predict_step
from monta.perfmodel.training.strategy import Strategy
from monta.variants import is_chunked

PUBLISHED_ALLTOALL_SPEEDUP = 8.0  # abstract: "8x AllToAll performance vs DeepSpeed under 8-card TP"
PUBLISHED_STEP_IMPROVEMENT = 0.13  # abstract: "13% overall latency improvement ... 16 A800 ... 8K"
PAPER_SIZES = [2**20 * k for k in (1, 2, 4, 8, 16, 32, 64)]


def step_variants() -> list[str]:
    """Every registered step variant (monta.variants: the core's, the baselines' and their compositions
    with MoNTA, any plugin's), legacy and deepspeed first."""
    from monta import variants as registry

    first = ["legacy", "deepspeed"]
    return first + [v for v in registry.names() if v not in first]


def max_layers(model, strategy: Strategy, seq: int, mem_GB: float) -> int:
    """The most layers that fit in memory with this strategy (0 if none)."""
    lo, hi = 0, model.num_layers
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory_per_rank(replace(model, num_layers=mid), strategy, seq).fits(mem_GB):
            lo = mid
        else:
            hi = mid - 1
    return lo


def alltoall_setup(cluster_name: str) -> dict[str, Any]:
    cluster = get_cluster(cluster_name, 2, 8)
    layout = make_layout(2, 8, 8)
    rows = sweep(cluster, layout, PAPER_SIZES, ["legacy", "deepspeed", "monta"], ["auto"])
    best = max((r for r in rows if is_chunked(r["variant"])), key=lambda r: r["speedup"])
    return {"cluster": cluster, "layout": layout, "rows": rows, "best": best}


def step_setup(
    cluster_name: str, layers: int | None, recompute: str, seq: int = 8192, contention: float = 0.0
) -> dict[str, Any]:
    cluster = get_cluster(cluster_name, 2, 8)
    base = Strategy(tp=8, ep=2, dp=2, pp=1, cp=1, micro_batch=1, recompute=recompute, zero=1)
    model = resolve_config("moe-2x70b")
    fit = max_layers(model, base, seq, cluster.mem_GB)
    if layers is None:
        if fit == 0:
            raise ValueError(
                f"no layer count of moe-2x70b fits 16 x {cluster.mem_GB:g} GB with {base.describe()}; "
                "try --recompute full"
            )
        layers = fit
    model = replace(model, num_layers=layers)
    steps = {
        v: predict_step(
            model,
            replace(base, variant=v),
            cluster,
            seq,
            global_batch=base.dp * base.micro_batch,
            contention=contention,
        )
        for v in step_variants()
    }
    mem = memory_per_rank(model, base, seq)
    return {
        "cluster": cluster,
        "model": model,
        "strategy": base,
        "seq": seq,
        "steps": steps,
        "memory": mem,
        "fits": mem.fits(cluster.mem_GB),
        "max_layers": fit,
    }


def run(clusters: list[str], layers: int | None, recompute: str, contention: float = 0.0) -> tuple[str, list[dict]]:
    """The printed report and the records (``source="predicted"``); ``contention``: the step's factor c
    (``monta.perfmodel.training.contention``)."""

    contention = K.check(contention, "--contention")
    out, recs = [], []
    out.append(
        "Assumptions: 'DeepSpeed' in the 8x claim = legacy (every TP rank AllToAlls the whole buffer, "
        "DeepSpeed < 0.14.5);\n  AllToAll sizes = per-rank dispatch buffer [E, C, M]; chunks = the model's "
        "'auto';\n  clusters: " + ", ".join(clusters) + " (an A800 node has 4 or 8 HDR NICs; "
        "docs/design.md#a800-hardware)."
    )
    for name in clusters:
        lines, a2a_recs, c = _alltoall_section(name)
        out += lines
        recs += a2a_recs
        lines, step_recs = _step_section(name, c, layers, recompute, contention)
        out += lines
        recs += step_recs
    return "\n".join(out), recs


def _alltoall_section(name: str) -> tuple[list[str], list[dict], Any]:
    """Report part [1] on cluster ``name``: the TP8 AllToAll sweep; its lines, records and the cluster."""
    from monta.results import make_record

    out, recs = [], []
    a = alltoall_setup(name)
    c = a["cluster"]
    out.append(f"\n[1] TP8 AllToAll, 2 x 8 {c.name} ({c.source})")
    out.append(
        f"    {'size':>6} {'legacy(us)':>11} {'deepspeed(us)':>14} {'monta(us)':>10} {'chunks':>6} "
        f"{'vs legacy':>9} {'vs deepspeed':>12}"
    )
    by = {(r["size_bytes"], r["variant"]): r for r in a["rows"]}
    for size in PAPER_SIZES:
        lg, ds, mo = by[(size, "legacy")], by[(size, "deepspeed")], by[(size, "monta")]
        out.append(
            f"    {size >> 20:>5}M {lg['time_us']:>11.1f} {ds['time_us']:>14.1f} {mo['time_us']:>10.1f} "
            f"{mo['chunks']:>6} {mo['speedup']:>8.2f}x {ds['time_us'] / mo['time_us']:>11.2f}x"
        )
        recs.append(
            make_record(
                kind="alltoall",
                source="predicted",
                experiment="paper",
                params={
                    "size_bytes": size,
                    "variant": "monta",
                    "chunks": mo["chunks"],
                    "nodes": 2,
                    "gpus_per_node": 8,
                    "tp": 8,
                    "ep": 2,
                    "cluster": c.name,
                },
                metrics={
                    "time_us": mo["time_us"],
                    "legacy_us": lg["time_us"],
                    "deepspeed_us": ds["time_us"],
                    "speedup": mo["speedup"],
                    "speedup_vs_deepspeed": ds["time_us"] / mo["time_us"],
                    "published_speedup": PUBLISHED_ALLTOALL_SPEEDUP,
                },
                config={"cluster": c.to_dict()},
            )
        )
    b = a["best"]
    out.append(
        f"    predicted monta vs legacy: up to {b['speedup']:.2f}x (at {b['size_bytes'] >> 20} MiB); "
        f"published: {PUBLISHED_ALLTOALL_SPEEDUP:g}x (the bound is TP = 8, reached only when the "
        "inter-node AllToAll is all that matters)"
    )
    return out, recs, c


def _step_section(
    name: str, c: Any, layers: int | None, recompute: str, contention: float
) -> tuple[list[str], list[dict]]:
    """Report part [2] on cluster ``name`` (``c``): the 2x70B step per variant; its lines and records."""
    from monta.results import make_record

    out, recs = [], []
    st = step_setup(name, layers, recompute, contention=contention)
    m, s, steps = st["model"], st["strategy"], st["steps"]
    out.append(
        f"\n[2] moe-2x70b step, seq {st['seq']}, 16 x {c.name}: {s.describe()}, global batch "
        f"{s.dp * s.micro_batch} sequences (no gradient accumulation), {K.describe(contention)}"
    )
    out.append(
        f"    layers: {m.num_layers} (80 in the 2x70B shape; the most that fit here: {st['max_layers']}); "
        f"memory {st['memory'].total / GB:.1f} GB/GPU of {c.mem_GB:g}"
        + ("" if st["fits"] else "  ** DOES NOT FIT: a prediction of a step that cannot run **")
    )
    ref_ds, ref_lg = steps["deepspeed"].total_us, steps["legacy"].total_us
    out.append(
        f"    {'variant':>15} {'step(ms)':>9} {'exchange(ms)':>12} {'grad(ms)':>8} "
        f"{'vs deepspeed':>12} {'vs legacy':>9}"
    )
    for v, b in steps.items():
        out.append(
            f"    {v:>15} {b.total_us / 1e3:>9.1f} {b.exchange_us / 1e3:>12.1f} {b.grad_us / 1e3:>8.1f} "
            f"{1 - b.total_us / ref_ds:>11.1%} {1 - b.total_us / ref_lg:>9.1%}"
        )
        recs.append(
            make_record(
                kind="step",
                source="predicted",
                experiment="paper",
                params={
                    **s.to_dict(),
                    "variant": v,
                    "model": m.name,
                    "layers": m.num_layers,
                    "seq": st["seq"],
                    "nodes": 2,
                    "gpus_per_node": 8,
                    "cluster": c.name,
                    "contention": contention,
                },
                metrics={
                    **b.to_dict(),
                    "step_time_us": b.total_us,
                    "improvement_vs_deepspeed": 1 - b.total_us / ref_ds,
                    "improvement_vs_legacy": 1 - b.total_us / ref_lg,
                    "published_improvement": PUBLISHED_STEP_IMPROVEMENT,
                },
                config={"cluster": c.to_dict(), "model": m.to_dict(), "memory": st["memory"].to_dict()},
            )
        )
    mo = steps["monta"].total_us
    out.append(
        f"    predicted monta step-time improvement: {1 - mo / ref_ds:.1%} vs deepspeed, {1 - mo / ref_lg:.1%} "
        f"vs legacy; published: {PUBLISHED_STEP_IMPROVEMENT:.0%} (baseline not stated in the abstract)"
    )
    out.append(run_model_line(st))
    out.append(step_band_line(mo / ref_ds))
    return out, recs


def run_model_steps(st: dict[str, Any]) -> dict[str, float]:
    """The same setup priced by the scored run model (``monta.perfmodel.training.run_step``, the step model
    ``monta predict published`` scores): step time (us) for legacy, deepspeed and monta."""
    from monta.perfmodel.training.run_shape import RunModel
    from monta.perfmodel.training.run_step import Layout, price_run

    m, s, c = st["model"], st["strategy"], st["cluster"]
    rm = RunModel(
        layers=m.num_layers, hidden=m.hidden, ffn=m.ffn, experts=m.num_experts, top_k=m.top_k, attention="gqa",
        heads=m.num_heads, kv_heads=m.num_kv_heads, head_dim=m.head_dim, vocab=m.vocab,
    )  # fmt: skip
    gpus = c.world_size
    lay = Layout(gpus=gpus, tp=s.tp, ep=s.ep, pp=s.pp, cp=s.cp, micro_batch=s.micro_batch, seq=st["seq"],
                 global_batch_tokens=s.dp * s.micro_batch * st["seq"])  # fmt: skip
    return {v: price_run(rm, replace(lay, variant=v), c)["total_us"] for v in ("legacy", "deepspeed", "monta")}


def run_model_line(st: dict[str, Any]) -> str:
    t = run_model_steps(st)
    return (
        f"    the scored run model (monta predict published's step model) on the same setup: monta "
        f"{1 - t['monta'] / t['deepspeed']:.1%} vs deepspeed, {1 - t['monta'] / t['legacy']:.1%} vs legacy "
        f"(step {t['monta'] / 1e3:.0f} ms)"
    )


STEPS_TABLE = "data/published/steps.csv"


def step_band(ratio: float, table: str | None = None) -> dict[str, Any] | None:
    """The band the published-steps score puts on a predicted step-time ratio (monta / deepspeed): the
    ratio times 1 +- the A/B pairs' median and upper-quartile ratio errors (``monta predict published --data
    data/published/steps.csv``); None when the table is not there."""
    from pathlib import Path

    import monta

    path = Path(table) if table else Path(monta.__file__).resolve().parents[1] / STEPS_TABLE
    if not path.is_file():
        return None
    s = _step_score(str(path))
    e = s["pair_ratio_error"]
    return {
        "median": e["median"], "q3": e["q3"], "pairs": s["pairs"], "right": s["pairs_direction_right"],
        "improvement": 1 - ratio,
        "median_band": (1 - ratio * (1 + e["median"]), 1 - ratio * (1 - e["median"])),
        "q3_band": (1 - ratio * (1 + e["q3"]), 1 - ratio * (1 - e["q3"])),
    }  # fmt: skip


def _step_score(path: str) -> dict[str, Any]:
    from monta.perfmodel.reports.published_steps import price_steps, read_step_rows, step_summary

    if path not in _SCORES:
        _SCORES[path] = step_summary(*price_steps(read_step_rows(path)))
    return _SCORES[path]


_SCORES: dict[str, dict[str, Any]] = {}


def step_band_line(ratio: float) -> str:
    b = step_band(ratio)
    if b is None:
        return f"    (no step score: {STEPS_TABLE} not found)"
    lo, hi = b["median_band"]
    lo3, hi3 = b["q3_band"]
    return (
        f"    error band from the published-steps score (A/B pair ratios: median error {b['median']:.0%}, upper "
        f"quartile {b['q3']:.0%}, {b['right']} of {b['pairs']} in the measured direction): {b['improvement']:.1%} vs "
        f"deepspeed is {lo:.0%} to {hi:.0%} at the median error, {lo3:.0%} to {hi3:.0%} at the upper quartile; "
        f"the published 13% lies {'inside' if lo <= PUBLISHED_STEP_IMPROVEMENT <= hi else 'outside'} the median band"
    )
