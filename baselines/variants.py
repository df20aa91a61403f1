"""Registration of the baselines' parts in ``monta.variants`` (entry point ``baselines`` of group
``monta.variants`` in pyproject.toml): the exchanges ``2dh`` (Tutel), ``allgather`` (Megatron-Core) and
``node-dedup`` (DeepEP), Lina's and Lancet's schedules, Lina's gradient micro-ops, and the variants
``lina``, ``lancet`` (their published form, on DeepSpeed's exchange), ``monta+lina`` and
``monta+lancet`` (MoNTA's exchange inside their schedules).

Each exchange carries its model (``monta_baselines.models``: the steps of its timeline, its byte
formulas), so the performance model, the benches and the exchange map price and count it by its entry.

Torch-free at import: the exchanges' and schedules' modules are imported when a rank builds them, the
models when the performance model first prices one.
"""

from __future__ import annotations

from monta.core_exchanges import slice_bytes, slice_routing_bytes
from monta.variants import CAPACITY_PASSES, LINA_CHUNK_BYTES  # LINA_CHUNK_BYTES: Lina's micro-op size (30 MB)


def _lina(ctx):
    from monta_baselines.lina import LinaSchedule

    return LinaSchedule(ctx.chunks)


def _lancet(ctx):
    from monta.mesh import new_groups
    from monta_baselines.lancet import LancetSchedule

    mesh = ctx.mesh
    # its own communicator over the EP ranks for agreeing on early windows (never shared)
    control = new_groups(mesh.layout, "ep", mesh.rank) if mesh.layout.ep > 1 else None
    return LancetSchedule(ctx.partitions, control, ctx.model.observers)


def _lancet_check(cfg) -> None:
    if cfg.top_k != 2:
        raise ValueError("the lancet schedule needs --topk 2 (it carries capacity for DeepSpeed's top-2 gate)")


def _lina_hidden(o):
    """The AllToAll split along tokens, the expert FFN started per chunk (forward and backward)."""
    hid_f = min(o.ex_fwd_us / 2, o.moe_fwd_us) * (1 - 1 / o.partitions)
    hid_b = min(o.ex_bwd_us / 2, 2 * o.moe_fwd_us) * (1 - 1 / o.partitions)
    return hid_f, hid_b


def _lancet_hidden(o):
    """Forward: attention partitioned along the batch hides the first-choice share of the dispatch
    (1/k of its slots are final before the last partition is gated under DeepSpeed's top-k slot rule);
    the rest of the exchange is pipelined with the experts per capacity chunk, as Lina's. A micro-batch
    of one sequence has no batch to partition. Backward: weight-gradient GEMMs with no path to an
    AllToAll fill it (greedy, ~half of backward)."""
    parts = min(o.partitions, o.micro_batch)
    early = o.ex_fwd_us / 2 / o.top_k
    hid_f = min(early, o.attn_fwd_us) * (1 - 1 / parts) + min((o.ex_fwd_us - early) / 2, o.moe_fwd_us) * (
        1 - 1 / o.partitions
    )
    hid_b = min(o.ex_bwd_us, o.attn_fwd_us + o.moe_fwd_us)
    return hid_f, hid_b


def _run_pass_2dh(*args, **kwargs):
    from monta_baselines.exchange_2dh import run_pass_2dh

    return run_pass_2dh(*args, **kwargs)


def _allgather(spec):
    from monta_baselines.exchange_allgather import AllGatherDispatcher

    return AllGatherDispatcher(spec)


def _node_dedup(spec):
    from monta_baselines.exchange_node_dedup import NodeDedupDispatcher

    return NodeDedupDispatcher(spec)


def _model(name: str):
    """A function of ``monta_baselines.models``, imported at its first call (the model is pure Python,
    but registering every plugin must stay cheap for the CLI)."""

    def hook(*args):
        from monta_baselines import models

        return getattr(models, name)(*args)

    hook.__name__ = hook.__qualname__ = name
    return hook


def register(registry) -> None:
    """The entry point: the baselines' exchanges, then their schedules and syncs, then the variant names."""
    _register_exchanges(registry)
    _register_schedules(registry)
    _register_variants(registry)


def _register_exchanges(registry) -> None:
    registry.add_exchange(
        "2dh",
        run_pass=_run_pass_2dh,
        price=_model("steps_2dh"),
        inter_bytes=slice_bytes,  # the core's: the 1/TP capacity slice crosses, only by another route
        routing_inter_bytes=slice_routing_bytes,
        about="Tutel's 2D hierarchical AllToAll: intra-node AllToAll to the same-local-index peer, then one "
        "inter-node AllToAll among those peers (N-1 large messages); drop and AllGather over TP as deepspeed",
    )
    registry.add_exchange(
        "allgather",
        dispatcher=_allgather,
        splits_tokens=True,
        price=_model("steps_allgather"),
        inter_bytes=_model("shard_gathered_bytes"),
        routing_inter_bytes=_model("shard_gathered_routing_bytes"),
        about="Megatron-Core's AllGather dispatcher: every token gathered over EP (1/TP shards across nodes, "
        "then over TP), local experts' routes kept; combine by ReduceScatter",
    )
    registry.add_exchange(
        "node-dedup",
        dispatcher=_node_dedup,
        splits_tokens=True,
        price=_model("steps_node_dedup"),
        inter_bytes=_model("shard_per_node_bytes"),
        routing_inter_bytes=_model("shard_per_node_routing_bytes"),
        about="DeepEP-style node-deduplicated dispatch: a token crosses to each node once, forwarded inside "
        "the node to its experts' ranks; the combine reduces inside the node before crossing back",
        stands_for=("deepep", "hybridep"),  # published runs' dispatchers that send a token once per node
    )


def _register_schedules(registry) -> None:
    registry.add_schedule(
        "lina",
        build=_lina,
        hidden_us=_lina_hidden,
        about="AllToAll split along tokens, each chunk's experts started while the next chunk is in flight "
        "(forward and backward)",
    )
    registry.add_schedule(
        "lancet",
        build=_lancet,
        check_model=_lancet_check,
        own_gate=True,  # a carried-capacity router per batch partition (baselines/lancet.py)
        hidden_us=_lancet_hidden,
        needs=(CAPACITY_PASSES,),  # it dispatches capacity windows of the encoded buffer during attention
        about="norm, attention and gate partitioned along the batch, each partition's final capacity window "
        "dispatched during the next one's attention; the rest pipelined with the experts; dW deferred "
        "into the backward AllToAlls",
    )
    registry.add_sync(
        "lina-microops",
        priority=True,
        chunk_bytes=LINA_CHUNK_BYTES,
        about="gradient AllReduce in equal 30 MB micro-ops, each launched only when no AllToAll waits or runs",
    )


def _register_variants(registry) -> None:
    registry.add_variant(
        "lina",
        exchange="deepspeed",
        schedule="lina",
        sync="lina-microops",
        about="Lina-style: token-chunked MoE pipeline + gradient micro-ops yielding to AllToAll",
    )
    registry.add_variant(
        "lancet",
        exchange="deepspeed",
        schedule="lancet",
        sync="after-backward",
        about="Lancet-style: batch-partitioned attention/gate overlap, dW deferral",
    )
    registry.add_variant(
        "monta+lina",
        exchange="monta",
        schedule="lina",
        sync="lina-microops",
        about="MoNTA's exchange inside Lina's schedule and gradient micro-ops",
    )
    registry.add_variant("2dh", exchange="2dh", about="DeepSpeed's MoE with Tutel's 2D hierarchical AllToAll")
    registry.add_variant(
        "allgather", exchange="allgather", about="DeepSpeed's MoE with Megatron's AllGather token dispatcher"
    )
    registry.add_variant(
        "node-dedup", exchange="node-dedup", about="DeepSpeed's MoE with node-deduplicated dispatch (DeepEP style)"
    )
    registry.add_variant(
        "monta+lancet",
        exchange="monta",
        schedule="lancet",
        sync="after-backward",
        about="MoNTA's exchange inside Lancet's partitioned schedule",
    )
