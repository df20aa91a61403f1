"""Time every compute piece of moe-2x70b at its TP8 shard shapes on one GPU, and the slowdown of a GEMM
while a copy runs on another stream; score the performance model's compute estimates against them.

What it times (bf16, one rank of TP8 EP2, micro-batch 1, sequence 8192: T = 8192 tokens, hidden 8192,
64 heads of 128 over 8 KV heads, FFN 28672, 2 experts top-2 cf 1.0, vocabulary 32000):
- the attention GEMMs (QKV [T, h] x [h, (h + 2 kv) / TP], output [T, h / TP] x [h / TP, h]) forward, dX, dW;
- the attention core (causal scaled-dot-product attention over the rank's 8 heads / 1 KV head) forward
  and backward;
- the gate ([T, h] x [h, E]) and the routed experts (SwiGLU: [R, h] x [h, 2 ffn / TP], then
  [R, ffn / TP] x [ffn / TP, h], R = cf x top-k x T routed slots) forward, dX, dW;
- the LM head ([T, h] x [h, vocab / TP]);
- the chunk copy of MoNTA's pipeline (a quarter of the [E, C, M] dispatch buffer, device to device);
- contention: the expert GEMM timed alone and while a copy runs on another stream, once through the
  copy engine (cudaMemcpyAsync, what torch's copy_ issues) and once through an SM kernel (an
  elementwise copy, as NCCL's kernels use SMs): (slowed time / alone) - 1 is a contention factor c.

The model's estimate of each piece (``monta.perfmodel.training.compute.forward_pieces_us`` on the
``--cluster`` file: FLOPs / (peak x efficiency), backward = 2 x forward) sits beside each measurement.
Each timing: ``--rounds`` rounds of ``--reps`` back-to-back launches timed with CUDA events (wall clock on
CPU); the table gives the median round and the range over rounds.

Run on a GPU:  python tools/gpu_compute_table.py --out OUT_DIR          (writes gpu-compute.json / .md)
The tests run it on the CPU at a reduced width (``--device cpu --scale 64``) to check the arithmetic.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from monta.model.config import PRESETS  # noqa: E402
from monta.perfmodel.training.compute import forward_pieces_us, layer_flops  # noqa: E402

TP = 8


def _timer(device: torch.device):
    """A callable that times ``fn`` run ``reps`` times (us per run)."""

    def run(fn, reps: int) -> float:
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1e6 / reps

    return run


def measure(fn, device, reps: int, rounds: int, warmup: int = 2) -> dict:
    timer = _timer(device)
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    xs = [timer(fn, reps) for _ in range(rounds)]
    return {"us": statistics.median(xs), "us_min": min(xs), "us_max": max(xs), "rounds": rounds, "reps": reps}


def shapes(scale: int) -> dict:
    """The TP8 shard shapes of one rank (widths divided by ``scale`` for a CPU check)."""
    m = PRESETS["moe-2x70b"]
    head_dim = m.hidden // m.num_heads
    d = {
        "T": m.micro_batch * m.seq // (1 if scale == 1 else scale),
        "h": m.hidden // scale,
        "kv": m.kv_dim // scale,
        "ffn_tp": m.ffn // TP // scale,
        "E": m.num_experts,
        "vocab_tp": m.vocab // TP // scale,
        "heads_tp": max(1, m.num_heads // TP),
        "kv_heads_tp": max(1, m.num_kv_heads // TP),
        "head_dim": max(8, head_dim // scale),
    }
    d["R"] = int(m.capacity_factor * m.top_k * d["T"])  # routed slots a rank computes (C x E, C = cf k T / E)
    d["buffer_bytes"] = m.num_experts * int(m.capacity_factor * m.top_k * d["T"] / m.num_experts) * d["h"] * 2
    return d


def gemm_cases(s: dict) -> dict[str, tuple[int, int, int]]:
    """(M, K, N) of each forward GEMM: [M, K] x [K, N]."""
    h, T = s["h"], s["T"]
    return {
        "attn_qkv": (T, h, (h + 2 * s["kv"]) // TP),
        "attn_out": (T, h // TP, h),
        "gate": (T, h, s["E"]),
        "expert_up": (s["R"], h, 2 * s["ffn_tp"]),
        "expert_down": (s["R"], s["ffn_tp"], h),
        "head": (T, h, s["vocab_tp"]),
    }


def time_gemms(s, device, dtype, reps, rounds) -> dict:
    out = {}
    for name, (M, K, N) in gemm_cases(s).items():
        a = torch.randn(M, K, device=device, dtype=dtype)
        w = torch.randn(K, N, device=device, dtype=dtype)
        g = torch.randn(M, N, device=device, dtype=dtype)
        flops = 2.0 * M * K * N
        for phase, fn in (
            ("fwd", lambda a=a, w=w: a @ w),
            ("dX", lambda g=g, w=w: g @ w.t()),
            ("dW", lambda a=a, g=g: a.t() @ g),
        ):
            r = measure(fn, device, reps, rounds)
            r.update(shape=[M, K, N], flops=flops, tflops=flops / (r["us"] * 1e6))
            out[f"{name}.{phase}"] = r
        del a, w, g
    return out


def time_attention(s, device, dtype, reps, rounds) -> dict:
    B, T, H, Hkv, D = 1, s["T"], s["heads_tp"], s["kv_heads_tp"], s["head_dim"]
    q = torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=True)
    # GQA's KV heads repeated up front (not timed): the flash kernels then run as for full multi-head attention.
    k = torch.randn(B, Hkv, T, D, device=device, dtype=dtype).repeat_interleave(H // Hkv, 1).requires_grad_(True)
    v = torch.randn(B, Hkv, T, D, device=device, dtype=dtype).repeat_interleave(H // Hkv, 1).requires_grad_(True)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    flops = 2.0 * T * T * H * D  # QK^T and AV, halved by the causal mask (the model's attn_core)
    r = measure(fwd, device, reps, rounds)
    r.update(flops=flops, tflops=flops / (r["us"] * 1e6), shape=[H, Hkv, T, D])
    out = {"attn_core.fwd": r}
    o = fwd()
    go = torch.randn_like(o)

    def fwd_bwd():
        torch.autograd.grad(fwd(), (q, k, v), go)

    rb = measure(fwd_bwd, device, max(1, reps // 2), rounds)
    for key in ("us", "us_min", "us_max"):  # backward alone = forward+backward - forward
        rb[key] = max(rb[key] - r["us"], 0.0)
    rb.update(flops=2 * flops, tflops=2 * flops / (max(rb["us"], 1e-9) * 1e6), shape=[H, Hkv, T, D])
    out["attn_core.bwd"] = rb
    return out


def time_copy(s, device, dtype, reps, rounds, chunks: int = 4) -> dict:
    n = s["buffer_bytes"] // chunks // 2
    src = torch.randn(n, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    r = measure(lambda: dst.copy_(src), device, reps, rounds)
    r.update(bytes=n * 2, GBps=n * 2 / (r["us"] * 1e3), chunks=chunks)
    return {"chunk_copy": r}


def _victims(s, device, dtype) -> dict:
    """Compute pieces to slow down: a tensor-core-bound GEMM, the flash attention core, a memory-bound GEMM."""
    M, K, N = gemm_cases(s)["expert_up"]
    a, w = torch.randn(M, K, device=device, dtype=dtype), torch.randn(K, N, device=device, dtype=dtype)
    H, T, D = s["heads_tp"], s["T"], s["head_dim"]
    q, k, v = (torch.randn(1, H, T, D, device=device, dtype=dtype) for _ in range(3))
    Mg, Kg, Ng = gemm_cases(s)["gate"]
    x, wg = torch.randn(Mg, Kg, device=device, dtype=dtype), torch.randn(Kg, Ng, device=device, dtype=dtype)
    return {
        "expert_up.fwd": lambda: a @ w,
        "attn_core.fwd": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "gate.fwd": lambda: x @ wg,
    }


def time_contention(s, device, dtype, reps, rounds) -> dict:
    """Each victim alone, then while a copy runs on another stream: through the copy engine (memcpy) and
    through an SM kernel. The side stream's own events say whether it covered the victim's whole window."""
    out = {}
    victims = _victims(s, device, dtype)
    if device.type != "cuda":  # one host: a "concurrent" copy is just a second thread fighting for the same cores
        return {name: {"alone": measure(fn, device, reps, rounds)} for name, fn in victims.items()}
    nbytes = 256 * 2**20
    src = torch.randn(nbytes // 2, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()
    aggressors = {
        "memcpy": lambda: dst.copy_(src),  # cudaMemcpyAsync D2D: the copy engine, HBM only
        "sm_copy": lambda: torch.mul(src, 1.0, out=dst),  # an elementwise kernel: SMs and HBM, as NCCL's kernels
    }
    one = {k: measure(fn, device, 5, 3)["us"] for k, fn in aggressors.items()}
    for vname, victim in victims.items():
        alone = measure(victim, device, reps, rounds)
        row = {"alone": alone}
        window_us = alone["us"] * reps * 2.0  # keep the side stream busy well past the timed launches
        for label, bg in aggressors.items():
            n_bg = max(2, int(window_us / max(one[label], 1.0)))
            xs, covered = [], []
            for _ in range(rounds):
                torch.cuda.synchronize()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                v0, v1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(side):
                    e0.record()
                    for _ in range(n_bg):
                        bg()
                    e1.record()
                v0.record()
                for _ in range(reps):
                    victim()
                v1.record()
                torch.cuda.synchronize()
                xs.append(v0.elapsed_time(v1) * 1e3 / reps)
                # The aggressor started before and ended after the victim's launches: they overlapped throughout.
                covered.append(e0.elapsed_time(v0) >= 0 and v1.elapsed_time(e1) >= 0)
            med = statistics.median(xs)
            row[f"with_{label}"] = {
                "us": med,
                "us_min": min(xs),
                "us_max": max(xs),
                "rounds": rounds,
                "reps": reps,
                "slowdown": med / alone["us"],
                "covered_rounds": sum(covered),
                "aggressor_alone_us": one[label],
                "aggressor_alone_GBps": nbytes / (one[label] * 1e3),
            }
        out[vname] = row
    return out


def model_estimates(cluster_name: str, scale: int) -> dict:
    """The model's forward time per piece (us) for one TP8 rank, and the same for the measured pieces."""
    from monta.hardware.profile import get_cluster

    cluster = get_cluster(cluster_name)
    m = PRESETS["moe-2x70b"]
    s = shapes(scale)
    if scale != 1:  # the CPU check: the same formulas at the reduced widths
        m = m.with_overrides(
            hidden=s["h"], ffn=s["ffn_tp"] * TP, vocab=s["vocab_tp"] * TP, seq=s["T"], heads=64, kv_heads=8
        )
    pieces = forward_pieces_us(m, s["T"], s["T"], TP, cluster)
    fl = layer_flops(m, s["T"], s["T"], TP)
    return {
        "cluster": cluster.name,
        "peak_tflops": cluster.peak_tflops,
        "gemm_eff": cluster.gemm_eff,
        "attn_eff": cluster.attn_eff,
        "copy_GBps": cluster.copy_GBps,
        "pieces_us": pieces,
        "flops": {"attention": fl.attn_gemm, "attention_core": fl.attn_core, "gate": fl.gate, "experts": fl.experts},
        "chunk_copy_us": s["buffer_bytes"] / 4 / (cluster.copy_GBps * 1e3),
    }


def score(meas: dict, model: dict) -> list[dict]:
    """Measured vs model per piece: forward, and backward (the model's 2 x forward) where timed."""

    def t(*keys):
        return sum(meas[k]["us"] for k in keys)

    rows = [
        ("attention", "fwd", t("attn_qkv.fwd", "attn_out.fwd"), model["pieces_us"]["attention"]),
        ("attention", "bwd", t("attn_qkv.dX", "attn_qkv.dW", "attn_out.dX", "attn_out.dW"),
         2 * model["pieces_us"]["attention"]),
        ("attention_core", "fwd", t("attn_core.fwd"), model["pieces_us"]["attention_core"]),
        ("attention_core", "bwd", t("attn_core.bwd"), 2 * model["pieces_us"]["attention_core"]),
        ("gate", "fwd", t("gate.fwd"), model["pieces_us"]["gate"]),
        ("experts", "fwd", t("expert_up.fwd", "expert_down.fwd"), model["pieces_us"]["experts"]),
        ("experts", "bwd", t("expert_up.dX", "expert_up.dW", "expert_down.dX", "expert_down.dW"),
         2 * model["pieces_us"]["experts"]),
        ("head", "fwd", t("head.fwd"), model["pieces_us"]["head"]),
        ("chunk_copy", "-", t("chunk_copy"), model["chunk_copy_us"]),
    ]  # fmt: skip
    return [
        {"piece": p, "phase": ph, "measured_us": mu, "model_us": mo, "error": (mo - mu) / mu if mu > 0 else None}
        for p, ph, mu, mo in rows
    ]


def markdown(res: dict) -> str:
    lines = [
        f"# Compute pieces of moe-2x70b, TP8 shard shapes, {res['dtype']}, on {res['device_name']}",
        "",
        f"torch {res['torch']}; {res['rounds']} rounds per timing (median, and min-max over rounds); "
        f"model: cluster `{res['model']['cluster']}` ({res['model']['peak_tflops']} TFLOP/s x gemm_eff "
        f"{res['model']['gemm_eff']}, attn_eff {res['model']['attn_eff']}, copy {res['model']['copy_GBps']} GB/s).",
        "",
        "| kernel | shape | us (median) | min-max | TFLOP/s |",
        "|---|---|---:|---:|---:|",
    ]
    for k, r in res["kernels"].items():
        tf = f"{r['tflops']:.0f}" if "tflops" in r else (f"{r['GBps']:.0f} GB/s" if "GBps" in r else "")
        shape = r.get("shape", r.get("bytes", ""))
        lines.append(f"| {k} | {shape} | {r['us']:.1f} | {r['us_min']:.1f}-{r['us_max']:.1f} | {tf} |")
    lines += ["", "| piece | phase | measured us | model us | model error |", "|---|---|---:|---:|---:|"]
    for r in res["score"]:
        err = f"{r['error'] * 100:+.0f}%" if r["error"] is not None else "-"
        lines.append(f"| {r['piece']} | {r['phase']} | {r['measured_us']:.1f} | {r['model_us']:.1f} | {err} |")
    lines += [
        "",
        "| victim | beside | us (median) | min-max | slowdown | rounds fully overlapped |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for victim, row in res["contention"].items():
        for k, r in row.items():
            sl = f"{r['slowdown']:.3f}" if "slowdown" in r else "1"
            cov = f"{r['covered_rounds']}/{r['rounds']}" if "covered_rounds" in r else "-"
            lines.append(f"| {victim} | {k} | {r['us']:.1f} | {r['us_min']:.1f}-{r['us_max']:.1f} | {sl} | {cov} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--scale", type=int, default=1, help="divide the widths by this (CPU check: 64)")
    ap.add_argument("--reps", type=int, default=20, help="launches per timed round (default 20)")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per kernel (default 7)")
    ap.add_argument("--cluster", default="h100", help="cluster file the model's estimates use (default h100)")
    ap.add_argument("--out", default=".", help="folder for gpu-compute.json and gpu-compute.md (default .)")
    ap.add_argument("--rescore", metavar="JSON", help="score a stored table against the model's current estimates")
    a = ap.parse_args(argv)
    if a.rescore:
        res = json.loads(Path(a.rescore).read_text())
        res["model"] = model_estimates(a.cluster, res["scale"])
        res["score"] = score(res["kernels"], res["model"])
        print(markdown(res))
        return 0
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_compute_table: error: no CUDA device; use --device cpu --scale 64", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    s = shapes(a.scale)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}, {dtype}, shapes {s}", flush=True)
    kernels = {}
    with torch.no_grad():
        kernels.update(time_gemms(s, device, dtype, a.reps, a.rounds))
        kernels.update(time_copy(s, device, dtype, a.reps, a.rounds))
    kernels.update(time_attention(s, device, dtype, a.reps, a.rounds))
    with torch.no_grad():
        contention = time_contention(s, device, dtype, a.reps, a.rounds)
    res = {
        "schema": "monta.gpu-compute/1",
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "dtype": str(dtype).removeprefix("torch."),
        "scale": a.scale,
        "rounds": a.rounds,
        "reps": a.reps,
        "shapes": s,
        "kernels": kernels,
        "contention": contention,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-compute.json").write_text(json.dumps(res, indent=1))  # the measurements, before any scoring
    res["model"] = model_estimates(a.cluster, a.scale)
    res["score"] = score(kernels, res["model"])
    (out / "gpu-compute.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (out / "gpu-compute.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
