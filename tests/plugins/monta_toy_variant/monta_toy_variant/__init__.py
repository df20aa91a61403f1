"""A toy monta variant plugin: the schedule ``toy-phases`` runs DeepSpeed's MoE forward phase by
phase (``monta.model.transformer.stock_schedule``) and counts the MoE layers it ran; the exchange
``toy-exchange`` runs each pass as two whole collectives of its own (drop, AllToAll, AllGather,
unchunked), counts its passes and is priced as deepspeed (``model_as``). The variant ``toy`` puts the
schedule on MoNTA's exchange with DeepSpeed's gradient reduction; ``toy-exchange`` is the exchange
under DeepSpeed's schedule.

``toy-dispatcher`` (``monta_toy_variant.dispatcher``, the worked example of docs/exchanges.md) is an exchange
written against the one interface, ``monta.comm.dispatcher.Dispatcher``, carrying its own model: the
steps of its timeline, its byte formulas and its description, all in one module and one registry call.

Torch-free at import: ``register`` only describes the parts; torch and monta's collectives are
imported when a rank runs them.
"""

from __future__ import annotations

PASSES = {"count": 0}  # toy-exchange passes run in this process (tests read it)


class ToyPhases:
    """The MoE forward, DeepSpeed's ops, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, moe, x):
        import os

        from monta.model.transformer import stock_schedule

        if os.environ.get("MONTA_TOY_FAIL"):  # TEST AID: a failure no config check can see, inside the run
            raise RuntimeError("toy-phases fails on purpose (MONTA_TOY_FAIL is set)")
        self.calls += 1
        return stock_schedule(moe, x)


def _build(ctx):
    return ToyPhases()


def _hidden(o):
    """Performance model: the toy hides nothing (its phases run one after another)."""
    return 0.0, 0.0


def toy_pass(x, spec, mesh, chunks, meter, phase):
    """One exchange pass as ``monta.comm.exchange.run_pass`` defines it, written out plainly: keep
    this TP rank's capacity slice (``spec.drop_in``), AllToAll over the EP group, AllGather the
    slices over the TP group (``spec.gather_out``); ``mesh.ep`` / ``mesh.tp``: the axes (``monta.mesh``).
    ``chunks`` is ignored (registered unchunked)."""
    from monta.comm.collectives import all_gather, all_to_all

    PASSES["count"] += 1
    tp, tpr = mesh.tp.size, mesh.tp.index
    E, c_in, M = x.shape
    drop, gather = spec.drop_in and tp > 1, spec.gather_out and tp > 1
    cl = c_in // tp if drop else c_in
    send = (x.view(E, tp, cl, M)[:, tpr] if drop else x).contiguous()
    elsize = x.element_size()
    if mesh.ep.size > 1:
        recv = send.new_empty(send.shape)
        if meter is not None:
            meter.all_to_all(mesh.ep.ranks, send.numel() * elsize, phase)
        all_to_all(recv, send, mesh.ep.group).wait()
    else:
        recv = send
    if not gather:
        return recv.clone() if recv is x else recv
    out = recv.new_empty((tp,) + tuple(recv.shape))
    if meter is not None:
        meter.all_gather(mesh.tp.ranks, recv.numel() * elsize, phase)
    all_gather(out, recv, mesh.tp.group).wait()
    return out.transpose(0, 1).reshape(E, tp * cl, M)  # [E, TP, Cl, M]: TP rank t's slice at t * Cl


def register(registry) -> None:
    registry.add_exchange(
        "toy-exchange",
        run_pass=toy_pass,
        model_as="deepspeed",
        about="toy plugin: drop, one AllToAll, one AllGather (deepspeed's bytes), passes counted",
    )
    registry.add_schedule(
        "toy-phases",
        build=_build,
        hidden_us=_hidden,
        about="toy plugin: DeepSpeed's MoE forward phase by phase, calls counted",
    )
    registry.add_variant(
        "toy",
        exchange="monta",
        schedule="toy-phases",
        sync="after-backward",
        about="toy plugin variant: MoNTA's exchange under the toy-phases schedule",
    )
    registry.add_variant(
        "toy-exchange", exchange="toy-exchange", about="toy plugin variant: the toy exchange under DeepSpeed's schedule"
    )
    from monta_toy_variant import dispatcher  # the worked example: one module, one registry call

    dispatcher.register(registry)
