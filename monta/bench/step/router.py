"""The router in ``monta bench step``: what each MoE layer's gate routed (its realized MaxVio and the
routes its capacity dropped, per layer and step), and ``--routing SPEC``, a routing workload in place of
the gate's expert choice (docs/routing.md).

Ranks keep one ``RouteTally`` per layer and step (tensors, read after the step's clock stops: no sync
and no collective in the timed region); rank 0 sums them over its EP group from the results every rank
already sends it, so a layer's figure is exact and costs no communication of its own.
"""

from __future__ import annotations

import statistics
from typing import Any

from monta.parallel import ParallelLayout


def ep_members(layout: ParallelLayout, rank: int = 0) -> tuple[int, ...]:
    """Global ranks of ``rank``'s EP group, in member order (member r holds experts r E/R ..)."""
    return layout.group_of("ep", rank).ranks


def ep_nodes(layout: ParallelLayout, rank: int = 0) -> int:
    """Nodes the EP group of ``rank`` spans (a routing's node loads are over these)."""
    return len({layout.node_of(r) for r in ep_members(layout, rank)})


def step_routing(text: str, cfg, layout: ParallelLayout):
    """The ``monta.routing.Routing`` of ``text`` at the step's shape: the EP group's members, each gate's
    tokens per micro-batch, the model's experts and top-k. ValueError (one line) for a spec it cannot hold."""
    from monta.routing import make_routing

    return make_routing(text, layout.ep, cfg.tokens_per_micro_batch, cfg.num_experts, cfg.top_k, ep_nodes(layout))


def member_choices(routing, ep_rank: int):
    """What every MoE layer of a variant built for EP member ``ep_rank`` routes by (``monta.moe.MoE``'s
    ``choices=``): ``routing``'s choices for that member; None without a routing (the gates' own)."""
    from monta.moe import WorkloadChoices

    return None if routing is None else WorkloadChoices(routing.choices[ep_rank])


def read_tallies(observers) -> list[dict | None]:
    """Per MoE layer, what its gate routed since ``observers.record_routes()`` (summed over its routing
    calls; None for a layer whose schedule routes with a gate of its own, not ``ExchangeMOELayer.route``);
    recording stops."""
    out = []
    for tallies in observers.take_routes():
        if not tallies:
            out.append(None)
            continue
        parts = [t.as_json() for t in tallies]
        out.append(
            {
                "counts": [sum(c) for c in zip(*(p["counts"] for p in parts))],
                "dropped_routes": sum(p["dropped_routes"] for p in parts),
                "dropped_tokens": sum(p["dropped_tokens"] for p in parts),
                "tokens": sum(p["tokens"] for p in parts),
            }
        )
    return out


def check_forced(name: str, tallies: list[dict | None], routing: str | None) -> None:
    """A variant whose schedule routes with its own gate ignores ``--routing``: refuse rather than report
    a routing that did not run."""
    if routing is not None and any(t is None for t in tallies):
        raise ValueError(
            f"variant {name} routes with its schedule's own gate, which --routing {routing} cannot replace; "
            "leave it out of --variants or leave out --routing"
        )


def router_metrics(layout: ParallelLayout, cfg, per_rank: list[dict], v: str) -> dict[str, Any] | None:
    """Variant ``v``'s router over rank 0's EP group: per step and layer the realized MaxVio and drop share
    (``monta.routing.router.layer_figures``), their means, and the layer range (per-layer means over steps).
    None when its schedule routes with its own gate (no tallies)."""
    from monta.routing.router import layer_figures

    members = ep_members(layout)
    steps = per_rank[0][v].get("router") or []
    if not steps or any(t is None for s in steps for t in s):
        return None
    figs = [
        [
            layer_figures(
                [per_rank[r][v]["router"][i][layer]["counts"] for r in members],
                [per_rank[r][v]["router"][i][layer]["dropped_routes"] for r in members],
                [per_rank[r][v]["router"][i][layer]["dropped_tokens"] for r in members],
                per_rank[members[0]][v]["router"][i][layer]["tokens"],
                cfg.top_k,
            )
            for layer in range(len(steps[i]))
        ]
        for i in range(len(steps))
    ]
    maxvio = [[f["maxvio"] for f in s] for s in figs]  # [step][layer]
    by_layer = [statistics.fmean(s[j] for s in maxvio) for j in range(len(maxvio[0]))]
    routes = sum(f["routes"] for s in figs for f in s)
    dropped = sum(f["dropped_routes"] for s in figs for f in s)
    return {
        "maxvio": statistics.fmean(x for s in maxvio for x in s),
        "maxvio_layer_min": min(by_layer),
        "maxvio_layer_max": max(by_layer),
        "drop_fraction": dropped / routes if routes else 0.0,
        "dropped_routes": dropped,
        "routes": routes,
        "dropped_tokens": sum(f["dropped_tokens"] for s in figs for f in s),
        "tokens": sum(f["tokens"] for s in figs for f in s),
        "maxvio_per_layer": maxvio,
        "drop_fraction_per_layer": [[f["drop_fraction"] for f in s] for s in figs],
        "expert_load_per_layer": [[f["expert_load"] for f in s] for s in figs],
        "ep_ranks": list(members),
    }


def workloads_at(layout: ParallelLayout, cfg) -> dict[str, float | None]:
    """The reference workloads' realized MaxVio at the step's shape (built, not run)."""
    from monta.routing.router import workload_maxvio

    return workload_maxvio(layout.ep, cfg.tokens_per_micro_batch, cfg.num_experts, cfg.top_k, ep_nodes(layout))


def router_lines(routing: str | None, rows: list[tuple[str, dict]]) -> list[str]:
    """The report's router lines: each variant's realized MaxVio (layer range) and drop share, then the
    synthetic workloads' at the same shape."""
    parts = []
    for v, m in rows:
        r = m.get("router")
        if r is None:
            parts.append(f"{v} not recorded (its schedule's own gate)")
            continue
        parts.append(
            f"{v} MaxVio {r['maxvio']:.2f} (layer range {r['maxvio_layer_min']:.2f}-{r['maxvio_layer_max']:.2f}), "
            f"{r['drop_fraction']:.1%} of routes dropped"
        )
    who = "the gate's own choice" if routing is None else f"--routing {routing}"
    lines = [f"# router ({who}; mean over MoE layers and steps, rank 0's EP group): " + "; ".join(parts)]
    work = rows[0][1].get("workload_maxvio") if rows else None
    if work:
        lines.append(
            "# the synthetic workloads' MaxVio at the same experts, top-k and tokens: "
            + ", ".join(f"{k} {'n/a' if x is None else f'{x:.2f}'}" for k, x in work.items())
        )
    return lines
