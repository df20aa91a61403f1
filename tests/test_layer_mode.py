"""``monta bench alltoall --mode layer``: the MoE layer's forward+backward around every registered exchange
on a 2 x 4 gloo world at TP 1 and 2 (one world), under W0, W5 (a rank that receives nothing) and a skewed
workload: its output and input gradient equal stock DeepSpeed's element for element (a capacity exchange
at the buffer's capacity, a dropless one at the dropless capacity), the check catches a corrupted
exchange, and a short emulated run prints its progress on stdout and records params.mode."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monta.results import read_records

pytestmark = pytest.mark.slow

WORKLOADS = ("W0", "W5", "W3")
EXPERTS, HIDDEN, K = 16, 16, 2
SIZE = EXPERTS * 32 * HIDDEN * 4  # C = 32: 256 tokens per rank at top-2


def layer_check_case(tp: int, specs, inject_fault: bool = False) -> dict:
    """Rank side: the bench's own layer-mode check (monta.bench.alltoall.runner.check_layer) per workload at one TP."""
    import torch

    from monta import variants as registry
    from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig
    from monta.bench.alltoall.runner import Runner, buffer_shape, check_layer, rank_input, variant_rows

    names = tuple(sorted(registry.exchanges()))
    cfg = AlltoallConfig(
        nodes=2, gpus_per_node=4, tp=tp, ep=8 // tp, sizes=(SIZE,), variants=names, chunks=(2,),
        dtype="float32", experts=EXPERTS, hidden=HIDDEN, warmup=0, iters=1, adaptive=False, max_iters=1,
        target_ci=0.0, budget_s=0.0, transport=None, aids=AlltoallAids(check=True), components=True,
        out=None, append=False, experiment="layer", backend="gloo", topology={},
        chunks_arg="2", topk=K, mode="layer",
    )  # fmt: skip
    r = Runner(cfg)
    shape = buffer_shape(SIZE, EXPERTS, HIDDEN, 4, tp)
    rows = variant_rows(cfg)
    out = {"rows": rows, "capacity_based": {v: r.capacity_based(v) for v, _ in rows}}
    for spec in specs:
        r.routing_spec = spec
        wrong = check_layer(r, rows, [shape], [SIZE], torch.float32, "cpu", inject_fault)
        # what the check compared is not trivially equal: the outputs are non-zero, and under a skew a
        # capacity exchange's output (routes dropped) differs from a dropless one's
        x = rank_input(r.rank // tp, 0, shape, torch.float32, 1, K, r.point(shape))
        cap_out, cap_grad = r.layer_rows.reference(x, True)
        free_out, _ = r.layer_rows.reference(x, False)
        out[spec] = {
            "wrong": wrong[0].tolist(),
            "nonzero": int((cap_out != 0).sum() + (cap_grad != 0).sum()),
            "drop_changes_output": bool((cap_out != free_out).any()),
        }
    return out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tp", [1, 2])
def test_layer_output_and_input_gradient_equal_stock_deepspeed_for_every_exchange(dist_world, tp):
    got = dist_world(8).run(layer_check_case, tp, WORKLOADS)
    first = got[0]
    rows, cap = first["rows"], first["capacity_based"]
    assert {v for v, _ in rows} >= {"legacy", "deepspeed", "monta", "2dh", "allgather", "node-dedup"}
    assert not any(v in ("a2a", "ag") for v, _ in rows)  # the dispatch's halves are no layer
    assert any(cap.values()) and not all(cap.values())  # capacity and dropless exchanges both checked
    for spec in WORKLOADS:
        assert first[spec]["wrong"] == [0] * len(rows), (spec, list(zip(rows, first[spec]["wrong"])))
        assert all(g[spec]["nonzero"] > 0 for g in got), spec
    # W0 drops nothing (capacity = dropless), a skewed workload drops on some rank
    assert not any(g["W0"]["drop_changes_output"] for g in got)
    assert any(g["W3"]["drop_changes_output"] for g in got)


def test_layer_check_counts_a_corrupted_exchange(dist_world):
    got = dist_world(8).run(layer_check_case, 2, ("W0",), True)[0]
    wrong = dict(zip([v for v, _ in got["rows"]], got["W0"]["wrong"]))
    assert wrong["monta"] > 0  # --inject-fault corrupts the core's pass: the layer check sees it
    assert wrong["allgather"] == 0 and wrong["node-dedup"] == 0  # token exchanges have no such pass


@pytest.mark.timeout(900)
def test_layer_mode_run_prints_progress_on_stdout_and_records_the_mode(tmp_path):
    out = tmp_path / "r.jsonl"  # --dilation 1: one run, no reruns of a CPU-bound size (the test's time)
    cmd = [sys.executable, "-m", "monta.cli", "bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2",
           "--sizes", "64K", "--hidden", "64", "--experts", "8", "--topk", "2", "--chunks", "2", "--iters", "2",
           "--warmup", "1", "--no-wandb", "--allow-unshaped", "--mode", "layer", "--routing", "W5", "--check",
           "--exchanges", "deepspeed,monta,node-dedup", "--dilation", "1", "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=800)
    assert p.returncode == 0, p.stderr[-3000:]
    progress = [ln for ln in p.stdout.splitlines() if ln.startswith("# progress")]
    assert progress and "64 KiB" in progress[0] and "elapsed" in progress[0] and "left" in progress[0], p.stdout
    assert "mode=layer" in p.stdout
    recs = read_records(out)
    assert {r["params"]["variant"] for r in recs} == {"deepspeed", "monta", "node-dedup"}
    assert all(r["params"]["mode"] == "layer" and r["metrics"]["wrong"] == 0 for r in recs)
    assert all(r["metrics"]["checked"] and r["metrics"]["time_us"] > 0 for r in recs)
