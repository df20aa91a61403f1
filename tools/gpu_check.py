"""Every exchange's ``--check`` on one GPU, and one NCCL rank: what a session with a lent GPU runs.

NCCL refuses two ranks on one device, so the multi-rank cases run gloo over CUDA tensors: ``--nproc-per-node
N`` ranks of ``monta bench alltoall --launcher env --backend gloo --device cuda`` share GPU 0, as two
"nodes" of N/2 ranks, which runs the exchanges' CUDA paths (the side streams, the chunk pipeline's copies,
``record_stream``) with real data checked against the reference after timing. One rank on NCCL then runs
the core exchanges through NCCL itself. Each case is one ``torchrun`` (``python -m torch.distributed.run
--standalone``), its records and log kept under ``--out``; ``gpu-check.json`` there names the GPU, the
driver, torch and CUDA, and per case the command, exit status, seconds, records and whether every record
was checked with 0 wrong elements.

Run: python tools/gpu_check.py --out results/gpu-check               (on a GPU machine)
     python tools/gpu_check.py --out DIR --device cpu --only core     (the same cases on CPU, gloo: the test)
     python tools/gpu_check.py --dry-run                              (the commands, nothing run)
Exit 0 when every case that ran passed, 1 when one failed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--sizes", "1M,4M", "--warmup", "1", "--iters", "2", "--check", "--no-wandb"]
TOKEN = [
    "--experts",
    "4",
    "--topk",
    "2",
    "--hidden",
    "256",
    "--sizes",
    "1M",
    "--warmup",
    "1",
    "--iters",
    "2",
    "--no-wandb",
]


def cases(ranks: int) -> dict[str, tuple[int, list[str]]]:
    """name -> (ranks, the bench's arguments after ``monta bench alltoall``), device and backend added later."""
    shape = ["--nodes", "2", "--gpus-per-node", str(ranks // 2), "--tp", "2"]
    core = ["--exchanges", "legacy,deepspeed,monta", "--chunks", "1,2,4"]
    return {
        "core": (ranks, [*shape, *core, *SMALL]),
        "core-native": (ranks, [*shape, *core, *SMALL, "--transport", "native"]),
        "token-level": (ranks, [*shape, "--exchanges", "deepspeed,2dh,allgather,node-dedup", *TOKEN, "--check"]),
        "nccl-one-rank": (
            1,
            ["--nodes", "1", "--gpus-per-node", "1", "--tp", "1", *core[:2], "--chunks", "1,2", *SMALL],
        ),
    }


def command(name: str, n: int, bench: list[str], device: str, out: Path) -> list[str]:
    backend = "nccl" if name.startswith("nccl") else "gloo"
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n)]
    run = ["-m", "monta.cli", "bench", "alltoall", "--launcher", "env", "--backend", backend, "--device", device]
    return [*launch, *run, *bench, "--out", str(out / f"{name}.jsonl"), "--force"]


def machine(device: str) -> dict:
    """What ran it: the GPU by name (and the driver), torch and its CUDA."""
    import torch

    info = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": "cpu", "driver": None}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
        try:
            q = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            info["driver"] = subprocess.run(q, capture_output=True, text=True, timeout=30).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def judge(path: Path) -> dict:
    """The case's records: how many, and whether every one was checked with 0 wrong elements."""
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    checked = [r for r in recs if r["metrics"].get("checked")]
    wrong = sum(int(r["metrics"].get("wrong") or 0) for r in recs)
    devices = sorted({str((r.get("config") or {}).get("device", "auto")) for r in recs})
    return {"records": len(recs), "checked": len(checked), "wrong": wrong, "devices": devices}


def run_case(name: str, cmd: list[str], out: Path, timeout: float) -> dict:
    # The checkout first, then whatever the caller put on the path (a GPU machine's carried packages).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "MONTA_WANDB": "0"}
    t0 = time.monotonic()
    with open(out / f"{name}.log", "w") as log:
        try:
            rc = subprocess.run(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    seconds = round(time.monotonic() - t0, 1)
    got = judge(out / f"{name}.jsonl")
    ok = rc == 0 and got["records"] > 0 and got["checked"] == got["records"] and got["wrong"] == 0
    tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
    return {"name": name, "command": cmd, "rc": rc, "seconds": seconds, **got, "ok": ok, "log_tail": tail}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for gpu-check.json, each case's records and log")
    ap.add_argument(
        "--ranks", type=int, default=4, help="ranks sharing the GPU in the gloo cases (a multiple of 4: TP 2 per node)"
    )
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the gloo cases on CPU tensors")
    ap.add_argument("--only", default="", help="comma list of cases to run (default: all): " + ", ".join(cases(4)))
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    if args.ranks < 4 or args.ranks % 4:  # two "nodes" of ranks/2, each split in TP groups of 2
        ap.error(f"--ranks {args.ranks}: give a multiple of 4 (two 'nodes' of ranks/2 ranks, TP 2 within each)")
    chosen = [c for c in args.only.split(",") if c] or list(cases(args.ranks))
    unknown = set(chosen) - set(cases(args.ranks))
    if unknown:
        ap.error(f"--only {args.only}: unknown case {sorted(unknown)[0]!r}; choose from {', '.join(cases(4))}")
    if not args.dry_run and not args.out:
        ap.error("--out DIR is needed (or --dry-run)")
    out = Path(args.out or "gpu-check").resolve()
    todo = {n: command(n, *cases(args.ranks)[n], args.device, out) for n in chosen}
    if args.dry_run:
        print("\n".join(" ".join(cmd) for cmd in todo.values()))
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device here: run it on a GPU machine, or --device cpu to check the script itself")
    out.mkdir(parents=True, exist_ok=True)
    report = {**machine(args.device), "ranks": args.ranks, "cases": []}
    for name, cmd in todo.items():
        if name.startswith("nccl") and args.device != "cuda":
            report["cases"].append({"name": name, "skipped": "NCCL needs a GPU (--device cpu)", "ok": None})
            continue
        case = run_case(name, cmd, out, args.timeout)
        report["cases"].append(case)
        print(f"{name}: {'ok' if case['ok'] else 'FAILED'} (rc {case['rc']}, {case['records']} records, "
              f"{case['checked']} checked, {case['wrong']} wrong, {case['seconds']} s)")  # fmt: skip
    ran = [c for c in report["cases"] if c["ok"] is not None]
    report["ok"] = all(c["ok"] for c in ran) and bool(ran)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{report['gpu']}: {sum(bool(c['ok']) for c in ran)} of {len(ran)} cases passed; wrote {out / 'gpu-check.json'}"
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
