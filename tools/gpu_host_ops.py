"""What one eager PyTorch op costs the host on this machine: the step model's host floor charges every kernel a
layer launches outside a CUDA graph ``HOST_US_PER_OP`` (monta/perfmodel/training/host_floor.py, 10 us, a figure
chosen with the published rows in view). This measures it where a GPU is lent: per op kind, the host's time to
issue N calls on tensors small enough that the GPU finishes each before the next is issued (so the wall time is
the host's), the same for a router-like sequence of ops (Megatron-Core's top-k router and the AllToAll
dispatcher's preprocess: GEMM, softmax, top-k, scatter, sums, a cumsum), and that sequence replayed as one CUDA
graph. Also runs on CPU (``--device cpu``) to test the tool: there the op's own compute is in its time.

    python tools/gpu_host_ops.py --out host-ops.json [--device cuda] [--iters 2000]

Writes a JSON file (per-op microseconds, their median, the router sequence per op eager and as a graph, the GPU
and CPU named) and prints a table. A bad flag prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time


def _ops(torch, dev):
    x = torch.randn(64, 64, device=dev)
    idx = torch.randint(0, 64, (64,), device=dev)
    return {
        "add": lambda: x + x,
        "mul": lambda: x * 0.5,
        "sigmoid": lambda: torch.sigmoid(x),
        "softmax": lambda: torch.softmax(x, dim=-1),
        "topk": lambda: torch.topk(x, 4, dim=-1),
        "sum": lambda: x.sum(dim=0),
        "cumsum": lambda: torch.cumsum(x, dim=0),
        "index_select": lambda: x.index_select(0, idx),
        "scatter": lambda: torch.zeros_like(x).scatter(1, idx[:, None], 1.0),
        "matmul": lambda: x @ x,
        "copy": lambda: x.clone(),
    }


def _router(torch, dev, tokens=64, hidden=64, experts=16, k=4):
    """A top-k router's forward and the dispatcher's preprocess as eager ops; returns (fn, ops per call)."""
    x, w = torch.randn(tokens, hidden, device=dev), torch.randn(hidden, experts, device=dev)

    def fn():
        logits = x @ w
        scores = torch.softmax(logits, dim=-1)
        probs, top = torch.topk(scores, k, dim=-1)
        probs = probs / probs.sum(dim=-1, keepdim=True)
        routing = torch.zeros_like(scores).scatter(1, top, 1.0)
        per_expert = routing.sum(dim=0)
        aux = (per_expert * scores.mean(dim=0)).sum() * experts
        offsets = torch.cumsum(per_expert, dim=0)
        return probs, routing, aux, offsets

    # matmul, softmax, topk, sum, div, zeros_like, scatter, sum, mean, mul, sum, mul, cumsum
    return fn, 13


def _per_call_us(fn, iters: int, sync) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    issued = time.perf_counter() - t0  # the host's time to issue them; the GPU may still be running
    sync()
    return 1e6 * issued / iters


def measure(device: str, iters: int) -> dict:
    import torch

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    per_op = {}
    for name, fn in _ops(torch, dev).items():
        per_op[name] = statistics.median(_per_call_us(fn, iters, sync) for _ in range(3))
    router, n = _router(torch, dev)
    eager = statistics.median(_per_call_us(router, max(1, iters // n), sync) for _ in range(3)) / n
    out = {
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "cpu": _cpu_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "iters": iters,
        "us_per_op": per_op,
        "median_us_per_op": statistics.median(per_op.values()),
        "router_us_per_op_eager": eager,
        "router_ops": n,
    }
    if dev.type == "cuda":  # the same sequence captured once, replayed: the host issues one graph launch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            router()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            router()
        replay = statistics.median(_per_call_us(graph.replay, max(1, iters // n), sync) for _ in range(3))
        out["router_us_per_op_graph"] = replay / n
    return out


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], exit_on_error=False)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=2000)
    try:
        a, extra = ap.parse_known_args(argv)
    except argparse.ArgumentError as e:
        extra, why = None, str(e)
    if extra is None or extra:
        why = why if extra is None else f"unknown {' '.join(extra)}"
        print(f"gpu_host_ops.py: {why}; usage: --out FILE [--device cuda|cpu] [--iters N]", file=sys.stderr)
        return 2
    if not a.out:
        print("gpu_host_ops.py: no --out; usage: --out FILE [--device cuda|cpu] [--iters N]", file=sys.stderr)
        return 2
    if a.iters < 1 or a.device not in ("cuda", "cpu"):
        print(f"gpu_host_ops.py: --device {a.device} --iters {a.iters}: give cuda or cpu and N >= 1", file=sys.stderr)
        return 2
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_host_ops.py: no CUDA device here; run it where a GPU is lent, or --device cpu", file=sys.stderr)
        return 2
    got = measure(a.device, a.iters)
    with open(a.out, "w") as f:
        json.dump(got, f, indent=1)
    print(f"host time per eager op on {got['gpu'] or got['cpu']} ({got['cpu']}), torch {got['torch']}:")
    for name, us in got["us_per_op"].items():
        print(f"  {name:14s} {us:7.2f} us")
    graph = got.get("router_us_per_op_graph")
    router = f"a router's {got['router_ops']} ops {got['router_us_per_op_eager']:.2f} us each eager"
    as_graph = f", {graph:.2f} us each as one CUDA graph" if graph is not None else ""
    print(f"  median {got['median_us_per_op']:.2f} us; {router}{as_graph}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
