"""Worker-side cases for the exchange tests: run inside a DistWorld rank, return plain data.

The reference is stock ``deepspeed.moe.layer.MoE`` on the same layout, seed, input and weights.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.distributed as dist

from monta.chunking import is_auto
from monta.dtypes import DTYPE_BYTES, torch_dtype

_state: dict[str, Any] = {"layout_key": None, "mesh": {}, "refs": {}}

DTYPES = {name: torch_dtype(name) for name in DTYPE_BYTES}


def setup_layout(nodes: int, gpn: int, tp: int, ep: int, expert_tp: bool):
    """Build (once per layout) and register this layout's groups with DeepSpeed."""
    from monta.groups import init_deepspeed_groups, reset_deepspeed_groups
    from monta.mesh import build_mesh
    from monta.parallel import ParallelLayout

    key = (nodes, gpn, tp, ep, expert_tp)
    layout = ParallelLayout(nodes, gpn, tp, ep)
    if layout not in _state["mesh"]:
        _state["mesh"][layout] = build_mesh(layout)
    mesh = _state["mesh"][layout]
    if _state["layout_key"] != key:
        reset_deepspeed_groups()
        init_deepspeed_groups(mesh, expert_tp)
        _state["layout_key"] = key
    return mesh


def _expert(hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(hidden, 2 * hidden), torch.nn.GELU(), torch.nn.Linear(2 * hidden, hidden)
    )


def _inputs(mesh, tokens: int, hidden: int, dtype: torch.dtype):
    # Every TP rank of a group holds the same tokens (no sequence parallelism): seed by DP index.
    g = torch.Generator().manual_seed(1000 + mesh.rank // mesh.layout.tp)
    x = torch.randn(2, tokens // 2, hidden, generator=g).to(dtype)
    w = torch.randn(2, tokens // 2, hidden, generator=g).to(dtype)
    return x, w


def _run_layer(layer: torch.nn.Module, x: torch.Tensor, w: torch.Tensor, seed: int) -> dict[str, Any]:
    x = x.clone().requires_grad_(True)
    torch.manual_seed(seed)  # the gate samples (RTS, 2nd-expert Gumbel): same draws in both runs
    out, l_aux, exp_counts = layer(x)
    loss = (out.float() * w.float()).sum() + l_aux
    loss.backward()
    return {
        "out": out.detach(),
        "x_grad": x.grad.detach(),
        "grads": {n: p.grad.detach().clone() for n, p in layer.named_parameters() if p.grad is not None},
        "exp_counts": exp_counts.detach(),
    }


def _plans(layer: torch.nn.Module) -> list:
    """Every RoutingPlan the layer's ``route`` returns from now on (the per-call chunks ride in it)."""
    inner, plans = layer.deepspeed_moe, []
    route = inner.route

    def recording(*args, **kwargs):
        plans.append(route(*args, **kwargs))
        return plans[-1]

    inner.route = recording
    return plans


def _ds_kwargs(hidden, experts, ep, k, expert_tp, capacity_factor, min_capacity):
    return dict(
        hidden_size=hidden,
        num_experts=experts,
        ep_size=ep,
        k=k,
        capacity_factor=capacity_factor,
        min_capacity=min_capacity,
        enable_expert_tensor_parallelism=expert_tp,
    )


def reference(mesh, *, k, expert_tp, tokens, hidden, experts, dtype, capacity_factor, min_capacity, seed):
    """Stock DeepSpeed MoE on this layout (cached per configuration)."""
    from deepspeed.moe.layer import MoE as DSMoE

    from monta.compat import gloo_safe_deepspeed_gather

    key = (mesh.layout, k, expert_tp, tokens, hidden, experts, dtype, capacity_factor, min_capacity, seed)
    if key not in _state["refs"]:
        torch.manual_seed(seed)
        layer = DSMoE(
            expert=_expert(hidden),
            **_ds_kwargs(hidden, experts, mesh.layout.ep, k, expert_tp, capacity_factor, min_capacity),
        ).to(DTYPES[dtype])
        layer.set_deepspeed_parallelism()
        x, w = _inputs(mesh, tokens, hidden, DTYPES[dtype])
        with gloo_safe_deepspeed_gather():
            res = _run_layer(layer, x, w, seed)
        res["state"] = copy.deepcopy(layer.state_dict())
        _state["refs"].clear()  # keep one: the matrix walks configurations in order
        _state["refs"][key] = res
    return _state["refs"][key]


def compare_case(
    *,
    nodes,
    gpn,
    tp,
    ep,
    k,
    expert_tp,
    exchange,
    chunks,
    dtype="float32",
    tokens=64,
    hidden=8,
    experts=4,
    capacity_factor=1.0,
    min_capacity=4,
    seed=7,
) -> dict[str, Any]:
    """monta.moe.MoE with ``exchange``/``chunks`` vs stock DeepSpeed: max abs differences and traffic."""
    from monta.moe import MoE

    mesh = setup_layout(nodes, gpn, tp, ep, expert_tp)
    common = dict(
        k=k,
        expert_tp=expert_tp,
        tokens=tokens,
        hidden=hidden,
        experts=experts,
        dtype=dtype,
        capacity_factor=capacity_factor,
        min_capacity=min_capacity,
        seed=seed,
    )
    ref = reference(mesh, **common)
    chooser = None
    if is_auto(chunks):  # the test is the top of the stack: it injects the model's chooser
        from monta.perfmodel.network.chunks import model_chooser

        chooser = model_chooser()
    layer = MoE(
        expert=_expert(hidden),
        exchange=exchange,
        chunks=chunks,
        mesh=mesh,
        chunk_chooser=chooser,
        **_ds_kwargs(hidden, experts, ep, k, expert_tp, capacity_factor, min_capacity),
    ).to(DTYPES[dtype])
    layer.load_state_dict(ref["state"])
    plans = _plans(layer)
    x, w = _inputs(mesh, tokens, hidden, DTYPES[dtype])
    res = _run_layer(layer, x, w, seed)

    def diff(a, b):
        return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0

    grad_diffs = {n: diff(g, ref["grads"][n]) for n, g in res["grads"].items()}
    missing = sorted(set(ref["grads"]) ^ set(res["grads"]))
    return {
        "rank": mesh.rank,
        "ref_scale": max(float(ref["out"].float().abs().max()), float(ref["x_grad"].float().abs().max())),
        "dtype": str(res["out"].dtype),
        "out_diff": diff(res["out"], ref["out"]),
        "x_grad_diff": diff(res["x_grad"], ref["x_grad"]),
        "grad_diffs": grad_diffs,
        "missing_grads": missing,
        "bitwise": bool(
            torch.equal(res["out"], ref["out"])
            and torch.equal(res["x_grad"], ref["x_grad"])
            and all(torch.equal(g, ref["grads"][n]) for n, g in res["grads"].items())
        ),
        "capacity": int(layer.deepspeed_moe.expected_capacity(tokens)),
        "chunks_used": plans[-1].chunks,
        "inter_bytes": layer.traffic.inter,
        "intra_bytes": layer.traffic.intra,
        "phases": {
            ph: layer.traffic.bytes(phase=ph) for ph in ("dispatch/fwd", "dispatch/bwd", "combine/fwd", "combine/bwd")
        },
    }


def bad_input_case(
    *, nodes, gpn, tp, ep, expert_tp, exchange, chunks, tokens=64, hidden=8, experts=4, layout_ep=None
) -> dict[str, Any]:
    """Build/run a layer with bad settings; report the error and that no collective traffic happened."""
    from monta.comm import activity
    from monta.moe import MoE

    mesh = setup_layout(nodes, gpn, tp, ep, expert_tp)
    err, layer = None, None
    try:
        layer = MoE(
            expert=_expert(hidden),
            exchange=exchange,
            chunks=chunks,
            mesh=mesh,
            **_ds_kwargs(hidden, experts, layout_ep or ep, 1, expert_tp, 1.0, 4),
        )
        x, _ = _inputs(mesh, tokens, hidden, torch.float32)
        layer(x)
    except ValueError as e:
        err = str(e)
    # The world must still be healthy (no rank stuck in a half-started collective).
    t = torch.ones(1)
    dist.all_reduce(t)
    traffic = (layer.traffic.inter + layer.traffic.intra) if layer is not None and layer.traffic else 0
    return {"error": err, "traffic": traffic, "allreduce": float(t), "a2a_busy": activity.ALLTOALL.busy()}


def wrong_group_case(*, nodes, gpn, tp, ep) -> str | None:
    """An EP group that does not match the layout (here: the TP group) must be refused."""
    from monta.comm.exchange import exchange_mesh

    mesh = setup_layout(nodes, gpn, tp, ep, True)
    try:
        exchange_mesh(mesh, ep=mesh.tp.group)
    except ValueError as e:
        return str(e)
    return None


def exchange_dtype_case(*, nodes, gpn, tp, ep, dtype, chunks) -> dict[str, Any]:
    """The pipelined exchange moves bytes only: bf16/fp16 results equal the fp32 results cast."""
    from monta.comm.exchange import PassSpec, exchange_mesh, run_pass

    mesh = setup_layout(nodes, gpn, tp, ep, True)
    g = exchange_mesh(mesh)
    gen = torch.Generator().manual_seed(5 + mesh.rank // tp)
    x = torch.randn(4, 8 * tp, 6, generator=gen)
    spec = PassSpec(True, True)
    ref = run_pass(x, spec, g, 1)
    got = run_pass(x.to(DTYPES[dtype]), spec, g, chunks)
    return {"dtype": str(got.dtype), "equal": bool(torch.equal(got, ref.to(DTYPES[dtype]))), "shape": list(got.shape)}


def shrinking_capacity_case(
    *, nodes, gpn, tp, ep, chunks, eval_capacity_factor, tokens=64, short_tokens=32, hidden=8, experts=4, seed=7
) -> dict[str, Any]:
    """One monta.moe.MoE built with ``chunks``, called as a training run meets it: a full batch, a short
    last batch, an eval pass at ``eval_capacity_factor``, a full batch again; each call against stock
    DeepSpeed (bitwise), with the chunks it used and what it logged."""
    import logging

    from deepspeed.moe.layer import MoE as DSMoE

    from monta.compat import gloo_safe_deepspeed_gather
    from monta.moe import MoE
    from monta.moe import layer as monta_layer

    mesh = setup_layout(nodes, gpn, tp, ep, True)
    common = dict(
        k=1,
        expert_tp=True,
        hidden=hidden,
        experts=experts,
        dtype="float32",
        capacity_factor=1.0,
        min_capacity=4,
        seed=seed,
    )
    kwargs = dict(_ds_kwargs(hidden, experts, ep, 1, True, 1.0, 4), eval_capacity_factor=eval_capacity_factor)
    layer = MoE(expert=_expert(hidden), exchange="monta", chunks=chunks, mesh=mesh, **kwargs)
    layer.load_state_dict(reference(mesh, tokens=tokens, **common)["state"])  # same weights for any token count
    monta_layer._REDUCED.clear()  # "once per process": this world's earlier cases must not count
    plans = _plans(layer)
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda rec: logged.append(rec.getMessage())
    monta_layer.log.addHandler(handler)
    calls = []
    try:
        for name, n in (("full", tokens), ("short", short_tokens)):
            ref = reference(mesh, tokens=n, **common)
            layer.zero_grad(set_to_none=True)  # each call's gradients against the reference's own
            res = _run_layer(layer, *_inputs(mesh, n, hidden, torch.float32), seed)
            same = all(torch.equal(res[key], ref[key]) for key in ("out", "x_grad"))
            same &= all(torch.equal(g, ref["grads"][p]) for p, g in res["grads"].items())
            calls.append((name, layer.deepspeed_moe.expected_capacity(n), plans[-1].chunks, bool(same)))
        stock = DSMoE(expert=_expert(hidden), **kwargs)
        stock.set_deepspeed_parallelism()
        stock.load_state_dict(layer.state_dict())
        x, _ = _inputs(mesh, tokens, hidden, torch.float32)
        outs = []
        for m in (stock, layer):
            m.eval()
            torch.manual_seed(seed)
            with torch.no_grad(), gloo_safe_deepspeed_gather():
                outs.append(m(x)[0])
        calls.append(
            (
                "eval",
                layer.deepspeed_moe.expected_capacity(tokens),
                plans[-1].chunks,
                bool(torch.equal(outs[0], outs[1])),
            )
        )
        layer.train()
        res = _run_layer(layer, *_inputs(mesh, tokens, hidden, torch.float32), seed)
        ref = reference(mesh, tokens=tokens, **common)
        calls.append(
            (
                "full again",
                layer.deepspeed_moe.expected_capacity(tokens),
                plans[-1].chunks,
                bool(torch.equal(res["out"], ref["out"])),
            )
        )
    finally:
        monta_layer.log.removeHandler(handler)
    return {"calls": calls, "logged": logged}
