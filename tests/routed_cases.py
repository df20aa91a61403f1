"""Worker-side cases for the exchanges' byte tests: a balanced routing (``monta.bench.routes``), one
dispatch of each exchange on it, its inter-node payload beside its formula."""

from __future__ import annotations

from typing import Any

import torch

from moe_cases import setup_layout


def dispatch_bytes_case(*, nodes, gpn, tp, ep, experts, k, hidden=16, capacity=32) -> dict[str, Any]:
    from monta.bench.routes import inter_formula, make_input
    from monta.comm import exchange as ex
    from monta.comm.accounting import TrafficMeter
    from monta.comm.dispatcher import build_dispatcher

    mesh = setup_layout(nodes, gpn, tp, ep, True)
    g = ex.exchange_mesh(mesh)
    geo = g.ep
    inp = make_input(mesh.rank // tp, 0, (experts, capacity, hidden), torch.float32, k)
    out: dict[str, Any] = {"rank": mesh.rank}
    ref = None
    for name in ("deepspeed", "2dh", "allgather", "node-dedup"):
        meter = TrafficMeter(mesh.layout, mesh.rank)
        # one interface: tokens and routing in, the expert input out (a buffer exchange encodes first)
        got = build_dispatcher(name, g, 1, tp > 1, meter).dispatch(inp.tokens, inp.plan)[0]
        ref = got if ref is None else ref
        text, value = inter_formula(name, inp, geo.nodes, geo.per_node, tp, 4) if mesh.rank == 0 else (None, None)
        out[name] = {
            "payload": meter.payload("inter"),
            "formula": value,
            "equal": bool(torch.equal(got, ref)),
        }
    return out
