"""What the exchange refactor (issue 32) must leave unchanged, computed by the code under test:
the training step's losses and exchange bytes for every variant, the AllToAll bench's bytes and
outputs for every exchange, and the performance model's predictions at a fixed set of points.

``tests/test_refactor_invariants.py`` compares them with ``tests/data/refactor_invariants.json``;
``python tests/invariant_cases.py --write`` rewrites that file (only ever from a commit whose numbers
are the reference: the file names it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "refactor_invariants.json"
MiB = 2**20

# Every variant the registry named (NAMED) and the compositions the tests run:
# token-level exchanges inside Lina's schedule, 2dh inside Lina's and Lancet's, Lancet with priority.
COMPOSED = (
    "exchange=node-dedup,schedule=lina,sync=lina-microops",
    "exchange=allgather,schedule=lina",
    "exchange=2dh,schedule=lina",
    "exchange=2dh,schedule=lancet",
    "exchange=monta,schedule=lancet,sync=priority",
)
STEP_OVERRIDES = {"layers": 2, "hidden": 256, "ffn": 896, "seq": 128, "micro_batch": 1}
STEPS = 2
BENCH_EXCHANGES = ("legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup", "toy-exchange")


# The registry's names at the reference commit (the test plugin's included); later additions have no
# stored numbers.
NAMED = (
    "deepspeed",
    "legacy",
    "monta",
    "monta+priority",
    "lina",
    "lancet",
    "monta+lina",
    "2dh",
    "allgather",
    "node-dedup",
    "monta+lancet",
    "toy",
    "toy-exchange",
)


def step_variants() -> list[str]:
    return [*NAMED, *COMPOSED]


# -- the training step (4 ranks: 2 nodes x 2, TP 2, EP 2) --------------------------------------------
def step_case(variants: list[str]) -> dict:
    from monta.bench.step.worker import build_world
    from monta.model.config import resolve_config
    from monta.model.engine import dp_rank_of, train_step
    from monta.parallel import ParallelLayout

    layout = ParallelLayout(2, 2, tp=2, ep=2)
    cfg = resolve_config("moe-2x70b-mini", **STEP_OVERRIDES)
    mesh, built = build_world(layout, cfg, variants, chunks=2, seed=1234, lancet_partitions=2)
    out = {}
    for v in variants:
        losses = [float(train_step(built[v], cfg, s, 1234, dp_rank_of(mesh))["loss"]).hex() for s in range(STEPS)]
        meters = [layer.moe.traffic for layer in built[v].model.layers]
        params = [p.detach().double() for p in built[v].model.parameters()]
        out[v] = {
            "losses": losses,
            # the final parameters, digested (losses alone round to float32 and a reordered sum hides there)
            "params": [float(sum(p.sum() for p in params)).hex(), float(sum(p.abs().sum() for p in params)).hex()],
            "inter_bytes": sum(m.inter for m in meters),
            "intra_bytes": sum(m.intra for m in meters),
        }
    return out


# -- the AllToAll bench's rows (8 ranks: 2 nodes x 4) --------------------------------------------------
def bench_case(tp: int, topk: int) -> dict:
    import torch

    from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig
    from monta.bench.alltoall.runner import Runner, buffer_shape, rank_input, variant_rows

    experts, hidden, size = 16, 16, 16 * 8 * 16 * 4 * 4
    cfg = AlltoallConfig(
        nodes=2,
        gpus_per_node=4,
        tp=tp,
        ep=8 // tp,
        sizes=(size,),
        variants=BENCH_EXCHANGES,
        chunks=(1, 2),
        dtype="float32",
        experts=experts,
        hidden=hidden,
        warmup=0,
        iters=1,
        adaptive=False,
        max_iters=1,
        target_ci=0.0,
        budget_s=0.0,
        transport=None,
        aids=AlltoallAids(check=True),
        components=True,
        out=None,
        append=False,
        experiment="invariants",
        backend="gloo",
        topology={},
        chunks_arg="1,2",
        topk=topk,
    )
    r = Runner(cfg)
    shape = buffer_shape(size, experts, hidden, 4, tp)
    inp = rank_input(r.rank // tp, 0, shape, torch.float32, 0, topk)
    out = {}
    for v, c in variant_rows(cfg):
        r.meter.reset()
        got = r.run(v, c, inp)
        want = r.expected(v, 0, shape, torch.float32, 0)
        out[f"{v}/{c}"] = {
            "inter": r.meter.inter,
            "intra": r.meter.intra,
            "meta_inter": r.meter.bytes("inter", op="meta"),
            "wrong": int((got != want).sum()),
            "sum": float(got.double().sum()).hex(),
        }
    return out


# -- the performance model --------------------------------------------------------------------------
def model_points() -> dict:
    from dataclasses import replace

    from monta import variants as registry
    from monta.hardware.profile import get_cluster
    from monta.model.config import resolve_config
    from monta.parallel import ParallelLayout
    from monta.perfmodel.network.exchange import exchange_time
    from monta.perfmodel.network.routed import inter_bytes_formula, routed_exchange_time
    from monta.perfmodel.training.step import predict_step
    from monta.perfmodel.training.strategy import Strategy

    layouts = [ParallelLayout(2, 8, tp=2, ep=8), ParallelLayout(2, 4, tp=2, ep=4), ParallelLayout(2, 4, tp=1, ep=8)]
    exchanges = ["legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup", "toy-exchange"]
    out: dict = {"exchange": {}, "reference": {}, "formula": {}, "step": {}}
    for lay in layouts:
        a800 = get_cluster("a800", lay.nodes, lay.gpus_per_node)
        emu = replace(a800, host_cores=2, a2a_cpu_us=(500.0, 0.002), ag_cpu_us=(50.0, 0.001))
        for cname, cl in (("a800", a800), ("emu", emu)):
            for S in (64 * 1024, 4 * MiB, 64 * MiB):
                for v in exchanges:
                    for chunks in (1, 3, "auto") if v == "monta" else (1,):
                        key = f"{lay.nodes}x{lay.gpus_per_node}tp{lay.tp}/{cname}/{S}/{v}/{chunks}"
                        b = exchange_time(v, S, lay, cl, chunks, top_k=2, experts=16, row_bytes=8192)
                        out["exchange"][key] = b.to_dict()
                ref = routed_exchange_time("deepspeed", S, lay, cl)
                out["reference"][f"{lay.nodes}x{lay.gpus_per_node}tp{lay.tp}/{cname}/{S}"] = ref.to_dict()
        for v in exchanges[:-1]:
            for k in (1, 2, 4):
                out["formula"][f"{lay.nodes}x{lay.gpus_per_node}tp{lay.tp}/{v}/{k}"] = list(
                    inter_bytes_formula(v, 16 * MiB, lay, top_k=k, experts=16)
                )
    cl = get_cluster("a800", 2, 8)
    for preset, tp, ep in (("moe-2x70b", 8, 2), ("moe-fine", 4, 4)):
        m = replace(resolve_config(preset), num_layers=4)
        for v in step_variants():
            for recompute, mb in (("full", 1), ("selective", 2)):
                s = Strategy(
                    tp=tp, ep=ep, dp=16 // tp, pp=1, cp=1, micro_batch=mb, recompute=recompute, zero=1, variant=v
                )
                try:
                    got = predict_step(m, s, cl, 4096, global_batch=s.dp * mb * 2).to_dict()
                except ValueError as e:  # a variant the model cannot price here: its one-line reason
                    got = {"error": str(e)}
                out["step"][f"{preset}/{v}/{recompute}"] = got
    out["variants"] = list(registry.names())
    return out


def collect() -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from dist_world import DistWorld

    res: dict = {"model": model_points()}
    w = DistWorld(4)
    try:
        res["step"] = w.run(step_case, step_variants(), timeout_s=1200)[0]
    finally:
        w.close()
    w = DistWorld(8)
    try:
        res["bench"] = {f"tp{tp}/k{k}": w.run(bench_case, tp, k) for tp, k in ((1, 1), (2, 2), (4, 4))}
    finally:
        w.close()
    return res


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/invariant_cases.py --write")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # the commit the numbers come from (run from an export of it: INVARIANTS_COMMIT names it)
    commit = os.environ.get("INVARIANTS_COMMIT") or os.popen("git rev-parse HEAD").read().strip()
    data = {"commit": commit, **collect()}
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA} from {commit}")
