"""One-GPU check of the token-level exchanges' local arithmetic on CUDA (world of one rank: every
collective is the identity, so this checks device placement and autograd, not NCCL): dispatch equals
DeepSpeed's encode, combine its decode, gradients equal the CPU run's.
Run: python tools/gpu_routed_check.py [--device cuda|cpu] (the tests run it on cpu)."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, ".")
from baselines import exchange_allgather, exchange_node_dedup  # noqa: E402  (the folder, not the installed monta_baselines)
from baselines.exchange_2dh import run_pass_2dh  # noqa: E402
from monta.bench.routes import make_input  # noqa: E402
from monta.comm.exchange import PassSpec  # noqa: E402
from monta.mesh import solo_mesh  # noqa: E402


def decode(y, slots, gates, S):
    padded = torch.cat([y.reshape(-1, y.shape[-1]), y.new_zeros(1, y.shape[-1])])
    routed = padded.index_select(0, slots.reshape(-1)).view(slots.shape[0], S, -1)
    return (routed * gates.unsqueeze(-1)).sum(0).to(y.dtype)


def run(mod, device, E=8, C=16, M=32, k=2):
    g = solo_mesh()
    inp = make_input(0, 0, (E, C, M), torch.float32, k)
    x = inp.tokens.to(device).float().requires_grad_(True)
    gates = inp.plan.gates.to(device).requires_grad_(True)
    plan = type(inp.plan)(inp.plan.slots.to(device), gates, C, E, inp.plan.num_tokens)
    out, h = mod.dispatch(x, plan, g)
    assert torch.equal(out, inp.buffer.to(device).float()), "dispatch != encode"
    y = out * 2 + 1
    z = mod.combine(y, plan, h, g)
    ref = decode(y.detach(), plan.slots, gates.detach(), plan.num_tokens)
    assert torch.equal(z, ref), "combine != decode"
    (z * torch.arange(z.numel(), device=device).view_as(z).float().sin()).sum().backward()
    return x.grad.cpu(), gates.grad.cpu()


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="token-level exchanges' local arithmetic on one device")
    ap.add_argument("--device", default="cuda")
    dev = torch.device(ap.parse_args(argv).device)
    print(torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu", torch.__version__)
    for name, mod in (("allgather", exchange_allgather), ("node-dedup", exchange_node_dedup)):
        gx, gg = run(mod, dev)
        cx, cg = run(mod, torch.device("cpu"))
        dx, dg = float((gx - cx).abs().max()), float((gg - cg).abs().max())
        print(f"{name}: dispatch == encode, combine == decode on {dev.type}; grads vs CPU: x {dx:.3g}, gates {dg:.3g}")
        assert torch.allclose(gx, cx, rtol=1e-5, atol=1e-5) and torch.allclose(gg, cg, rtol=1e-5, atol=1e-4)
    g = solo_mesh()
    buf = make_input(0, 0, (8, 16, 32), torch.float32, 2).buffer.to(dev)
    assert torch.equal(run_pass_2dh(buf, PassSpec(True, True), g, 1), buf)
    print("2dh: the pass (CUDA streams) returns its input at EP 1")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
