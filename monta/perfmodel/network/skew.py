"""The model under skewed routing (``monta predict skew``): one routing (``monta.routing``) priced for every
exchange at a point.

* A **capacity-buffer** exchange (the registry entry offers ``CAPACITY_PASSES``: the core's legacy,
  deepspeed, monta and any plugin's ``run_pass`` exchange) moves its [E, C, M] buffer whatever the
  routing: its time is the balanced price, and it loses the routes past the capacity (the routing's
  drops at ``cf``, DeepSpeed's position rule).
* A **token-level** exchange (its own dispatcher) is dropless. One whose bytes do not follow the routing
  (its registered ``routing_inter_bytes`` gives the same bytes for every source and for the balanced
  routing: a gather of every token) keeps its balanced price. One that moves what the routing sends
  (its own ``price`` hook) waits for the most-loaded rank: its balanced steps are re-priced with every
  transfer term scaled by the worst rank's load relative to the mean (``SkewFactors``): inter-node
  terms (time and bytes) by the larger of the worst link's and the worst node's inter-node bytes (sent)
  under the exchange's own ``routing_inter_bytes`` over W0's (``inter_bytes_factor``; without that hook
  its routes, sent or received, over the mean), intra-node terms by the worst link's intra-node routes
  over the mean (a link: one rank's where each GPU has its own, a node's where its ranks share one, as
  on the emulator: ``link_groups``), copies by the worst rank's routes received over the mean. The count
  exchanges (fixed size) are not scaled. The scaled steps are scheduled as the balanced ones are
  (``schedule.schedule_steps``). A balanced routing (W0) has every factor exactly 1, so its price is the
  balanced one.

Inside a node routes, not bytes, are counted; across nodes an exchange that sends a token once per node
(deduplicating) is scaled by its own bytes: at top-4 of 32 experts nearly every token crosses already, so
a hot node adds ~5% to its inter-node bytes where its routes grow 1.6x.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from monta.perfmodel.network.collectives import CollTime


@dataclass(frozen=True)
class SkewFactors:
    """The worst rank's (and node's) load over the mean, per link class; 1.0 = balanced."""

    inter: float
    intra: float
    rank: float

    @classmethod
    def of(cls, routing, inter_group: int = 1, intra_group: int = 1) -> SkewFactors:
        """``inter_group`` / ``intra_group``: consecutive EP members that share one link (``link_groups``)."""
        t = routing.traffic().double()  # [src, dst] routes
        R, N = routing.ranks, routing.nodes
        node = [r // (R // N) for r in range(R)]
        cross = t.new_tensor([[float(node[s] != node[d]) for d in range(R)] for s in range(R)])
        inter_t, intra_t = t * cross, t * (1 - cross)
        per_node_in = inter_t.sum(0).view(N, -1).sum(1)
        per_node_out = inter_t.sum(1).view(N, -1).sum(1)
        inter = max(
            _worst(_grouped(inter_t.sum(1), inter_group), _grouped(inter_t.sum(0), inter_group)),
            _worst(per_node_out, per_node_in),
        )
        intra = _worst(_grouped(intra_t.sum(1), intra_group), _grouped(intra_t.sum(0), intra_group))
        return cls(inter, intra, _worst(t.sum(1), t.sum(0)))


def _grouped(load, group: int):
    return load.view(-1, group).sum(1) if group > 1 else load


def link_groups(routing, cluster, tp: int) -> tuple[int, int]:
    """How many consecutive EP members share one inter-node link (a NIC) and one intra-node link: one
    where each GPU has its own, a node's members where they share one (the emulator: one shaped veth and
    one loopback per node), so the most-loaded link, not the most-loaded rank, sets the time there."""
    L = routing.ranks // routing.nodes
    gpus_per_nic = max(1, cluster.gpus_per_node // max(1, cluster.nics_per_node))
    return min(L, max(1, gpus_per_nic // tp)), (L if cluster.intra_shared else 1)


def _worst(out, inn) -> float:
    """max over ranks of (sent, received) / the mean sent (= the mean received); 1 with nothing to send."""
    mean = float(out.mean())
    return max(float(out.max()), float(inn.max())) / mean if mean > 0 else 1.0


def scale_call(ct: CollTime, f: SkewFactors) -> CollTime:
    ti, tn = ct.intra_us * f.intra, ct.inter_us * f.inter
    return CollTime(max(ti, tn), ti, tn, ct.intra_bytes * f.intra, ct.inter_bytes * f.inter)


def scale_steps(steps: list, f: SkewFactors) -> list:
    """The balanced steps with their transfer terms scaled (module docstring); metadata steps kept."""
    out = []
    for s in steps:
        if s.role in ("a2a", "ag"):
            out.append(replace(s, ct=scale_call(s.ct, f)))
        elif s.role in ("pack", "copy"):
            out.append(replace(s, nbytes=s.nbytes * f.rank))
        else:
            out.append(s)
    return out


@dataclass(frozen=True)
class SkewPrice:
    """One exchange under one routing: the balanced and the worst-rank time of one dispatch, and the
    routes it drops (0 for a dropless exchange)."""

    variant: str
    dropless: bool
    balanced_us: float
    worst_us: float
    dropped_routes: int
    drop_fraction: float
    inter_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def is_capacity_exchange(variant: str) -> bool:
    """True for a buffer exchange (it offers capacity passes), False for a token-level one."""
    from monta import variants as registry

    return registry.CAPACITY_PASSES in registry.exchange(variant).capabilities


def _sent_bytes(hook, routing, rank: int, tp: int) -> int:
    """The exchange's inter-node payload formula (its ``routing_inter_bytes``, per byte of a row) for
    source ``rank``'s tokens, dropless. The hook speaks for member 0 on node 0, so the experts are
    relabelled to put ``rank``'s node first (node membership is all a formula reads)."""
    import torch

    from monta.exchanges import RoutingBytes

    R, N, E = routing.ranks, routing.nodes, routing.experts
    cap = routing.dropless_capacity()
    shift = (rank // (R // N)) * (E // N)
    c = routing.choices[rank]
    rot = torch.where(c >= 0, (c - shift) % E, c)
    moved = type(routing)(routing.spec, rot.unsqueeze(0).expand(R, -1, -1), E, N)
    slots = moved.slots(0, cap)
    r = RoutingBytes(E * cap, 1, routing.tokens, R, N, R // N, tp, E, cap, slots)
    return int(hook(r)[1])


def inter_bytes_factor(hook, routing, tp: int, group: int = 1) -> float:
    """The inter-node factor of a token-level exchange from its own byte formula: the larger of the
    worst link's (``group`` members share one) and the worst node's inter-node bytes (sent) over the
    balanced routing's mean (W0 of the same shape; else this routing's mean). Sent bytes only: on two
    nodes what a node receives is what the other sends."""
    from monta.routing import make_routing, parse_spec

    if parse_spec(routing.spec).balanced:  # W0 is the balanced price, exactly
        return 1.0
    R, N = routing.ranks, routing.nodes
    sent = [_sent_bytes(hook, routing, r, tp) for r in range(R)]
    per_node = [sum(sent[n * (R // N) : (n + 1) * (R // N)]) for n in range(N)]
    per_link = [sum(sent[i : i + group]) for i in range(0, R, group)]
    try:
        w0 = make_routing("W0", R, routing.tokens, routing.experts, routing.k, N)
        base = sum(_sent_bytes(hook, w0, r, tp) for r in range(R)) / R
    except ValueError:  # no exactly balanced routing of this shape
        base = sum(sent) / R
    if base <= 0:
        return 1.0
    return max(max(per_link) / (base * group), max(per_node) / (base * R / N))


def moves_what_routing_sends(variant: str, routing, tp: int) -> bool:
    """Whether a token-level exchange's bytes follow the routing: its registered ``routing_inter_bytes``
    differs between sources or from the balanced routing's (W0 of the same shape). An exchange without
    the hook is taken to follow it."""
    from monta import variants as registry
    from monta.routing import make_routing

    hook = registry.exchange(variant).routing_inter_bytes
    if hook is None:
        return True
    sent = {_sent_bytes(hook, routing, r, tp) for r in range(routing.ranks)}
    try:
        w0 = make_routing("W0", routing.ranks, routing.tokens, routing.experts, routing.k, routing.nodes)
        sent.add(_sent_bytes(hook, w0, 0, tp))
    except ValueError:  # no exactly balanced routing of this shape: compare the sources alone
        pass
    return len(sent) > 1


def _check(routing, ep, top_k: int, experts: int) -> None:
    if routing.ranks != ep.size or routing.nodes != ep.nodes:
        raise ValueError(
            f"routing {routing.spec} has {routing.ranks} ranks on {routing.nodes} nodes; the EP group has "
            f"{ep.size} on {ep.nodes}: build it with make_routing(..., ranks={ep.size}, nodes={ep.nodes})"
        )
    if routing.k != top_k or routing.experts != experts:
        raise ValueError(
            f"routing {routing.spec} is top-{routing.k} over {routing.experts} experts, not top-{top_k} over {experts}"
        )


def skew_price(
    variant: str,
    routing,
    bytes_per_rank: float,
    layout,
    cluster,
    *,
    chunks=1,
    cf: float = 1.0,
    row_bytes: float | None = None,
) -> SkewPrice:
    """``variant``'s dispatch under ``routing`` (module docstring). ``bytes_per_rank``: the [E, C, M]
    buffer of one rank. With ``row_bytes`` (M x element size) the buffer's capacity C is known: a buffer
    exchange drops past C, and a token-level one moves the routing's T k routes of ``row_bytes`` (the
    whole buffer at capacity factor 1, 1/cf of it above; ``monta.routing.stats.tokens_per_rank``);
    without it, ``cf`` is the capacity factor a buffer exchange drops at and the routes fill the buffer."""
    from monta import variants as registry
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.network import routed
    from monta.perfmodel.network.exchange import exchange_time
    from monta.perfmodel.network.schedule import schedule_steps
    from monta.perfmodel.network.timeline import layout_shapes

    cluster = get_cluster(cluster, layout.nodes, layout.gpus_per_node)
    ep, tp = layout_shapes(layout)
    k, E = routing.k, routing.experts
    _check(routing, ep, k, E)
    if is_capacity_exchange(variant):
        b = exchange_time(variant, bytes_per_rank, layout, cluster, chunks, top_k=k, experts=E, row_bytes=row_bytes)
        cap = int(bytes_per_rank // (E * row_bytes)) if row_bytes else None  # the buffer's own C
        s = routing.summary(cf, cap=cap)
        return SkewPrice(variant, False, b.total_us, b.total_us, s["dropped_routes"], s["drop_fraction"], b.inter_bytes)
    if row_bytes:  # what the routing sends: T k routes, the buffer's bytes only when it is full (cf 1)
        bytes_per_rank = routing.tokens * k * row_bytes
    if not moves_what_routing_sends(variant, routing, tp.size):  # e.g. a gather of every token: bytes fixed
        b = exchange_time(variant, bytes_per_rank, layout, cluster, chunks, top_k=k, experts=E, row_bytes=row_bytes)
        return SkewPrice(variant, True, b.total_us, b.total_us, 0, 0.0, b.inter_bytes)
    if variant not in routed.routed_exchanges():
        raise ValueError(f"exchange {variant!r} moves tokens but registers no price= steps to scale under skew")
    steps = routed.token_level_price(variant)(float(bytes_per_rank), ep, tp, cluster, k, E, row_bytes, 1)
    balanced = schedule_steps(variant, steps, cluster)
    inter_group, intra_group = link_groups(routing, cluster, tp.size)
    f = SkewFactors.of(routing, inter_group, intra_group)
    hook = registry.exchange(variant).routing_inter_bytes
    if hook is not None:  # its own bytes, not its routes, on the most-loaded link (module docstring)
        f = replace(f, inter=inter_bytes_factor(hook, routing, tp.size, inter_group))
    worst = schedule_steps(variant, scale_steps(steps, f), cluster)
    return SkewPrice(variant, True, balanced.total_us, worst.total_us, 0, 0.0, worst.inter_bytes)


def skew_table(specs, variants, layout, cluster, size: int, experts: int, hidden: int, elsize: int, k: int, cf: float):
    """Every (routing, exchange) pair at one point: (routing, [SkewPrice]) rows. ``size``: bytes of the
    [E, C, M] buffer, DeepSpeed's capacity at ``cf`` for T tokens per rank (the AllToAll bench's shape,
    ``tokens_per_rank``: T = E C / k at cf 1)."""
    from monta.perfmodel.network.timeline import layout_shapes
    from monta.routing import make_routing
    from monta.routing.stats import tokens_per_rank

    ep, tp = layout_shapes(layout)
    row = experts * hidden * elsize
    if size % row:
        raise ValueError(f"size {size} B is not a whole [E={experts}, C, M={hidden}] buffer; use a multiple of {row} B")
    tokens = tokens_per_rank(experts, size // row, k, cf, tp.size)
    out = []
    for spec in specs:
        r = make_routing(spec, ep.size, tokens, experts, k, ep.nodes)
        prices = [skew_price(v, r, size, layout, cluster, cf=cf, row_bytes=hidden * elsize) for v in variants]
        out.append((r, prices))
    return out


def format_table(rows, cf: float) -> str:
    lines = [
        f"{'routing':>22} {'maxvio':>7} {'exchange':>12} {'kind':>8} {'balanced us':>12} {'worst us':>11} "
        f"{'x bal':>6} {'dropped':>8} {'drop %':>7}"
    ]
    for r, prices in rows:
        for p in prices:
            kind = "dropless" if p.dropless else f"cf {cf:g}"
            ratio = p.worst_us / p.balanced_us if p.balanced_us else float("nan")
            lines.append(
                f"{r.spec:>22} {r.maxvio():>7.3f} {p.variant:>12} {kind:>8} {p.balanced_us:>12.1f} "
                f"{p.worst_us:>11.1f} {ratio:>6.2f} {p.dropped_routes:>8} {100 * p.drop_fraction:>6.1f}%"
            )
    return "\n".join(lines)


# -- ``monta predict skew`` (registered by monta.perfmodel.reports.cli beside the other predictions) ----
DEFAULT_ROUTINGS = "W0,W1,W2,W3,W4,W5,W6,W7,lognormal:maxvio=0.2,lognormal:maxvio=1,lognormal:maxvio=4"


def split_specs(text: str) -> list[str]:
    """'W0,lognormal:maxvio=1,seed=2,W3' -> ['W0', 'lognormal:maxvio=1,seed=2', 'W3']: a part with '=' and
    no ':' continues the spec before it."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" in part and ":" not in part and out:
            out[-1] += "," + part
        else:
            out.append(part)
    if not out:
        raise ValueError(f"--routing {text!r}: give workloads, e.g. W0,W3,lognormal:maxvio=1")
    return out
