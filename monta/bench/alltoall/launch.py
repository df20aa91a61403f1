"""How ``monta bench alltoall`` launches its sweep on the emulator: once, then (``--dilation auto``) each
CPU-bound size again alone on a slower clock (``monta.bench.dilation`` decides which and how slow), and
``--dilation F``'s clock from the start. Rank 0 writes each launch's records to a file of its own; the
bench writes the final ones to --out at once. A launch's time limits are here too (``monta.bench.alltoall``
imports them, as before).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from monta.bench.alltoall.config import AlltoallConfig

# Unshaped links on this machine's loopback: what a rank's exchange sees, roughly (CPU-bound copies).
_UNSHAPED_GBPS = 4.0
# What every rank imports: imported once by the emulator's supervisor, which forks the ranks from itself
# (monta.emulate.forkstart) instead of 8-16 interpreters importing torch and DeepSpeed at once.
ALLTOALL_PRELOAD = ("torch", "torch.distributed", "deepspeed", "deepspeed.moe.layer", "monta.bench.alltoall.worker")


def expected_seconds(cfg: AlltoallConfig) -> float:
    """A generous estimate of one run's wall time: start-up (imports, rendezvous, per rank on a
    shared machine), then per size the warm-up, the timed iterations (the most adaptive iterations
    can take: --max-iters, or --budget-s when set) and the check, each iteration one call of every
    variant row at the legacy exchange's inter-node time (the slowest variant's bytes)."""
    topo = cfg.topology or {}
    gbps = topo.get("inter_gbps") or _UNSHAPED_GBPS
    from monta import variants as registry

    chunked = sum(registry.exchange(v).chunked for v in cfg.variants)
    rows = len(cfg.variants) - chunked + len(cfg.chunks) * chunked
    rows += 2 if cfg.tp > 1 and cfg.components else 0
    total = 60.0 + 5.0 * cfg.nodes * cfg.gpus_per_node
    for size in cfg.sizes:
        call = max(0.01, cfg.gpus_per_node * size * 8 / (gbps * 1e9))
        round_s = rows * call
        timed = cfg.iters * round_s
        if cfg.max_iters > cfg.iters and cfg.target_ci > 0:
            extra = (cfg.max_iters - cfg.iters) * round_s
            timed += min(extra, cfg.budget_s + round_s) if cfg.budget_s else extra
        total += cfg.warmup * round_s + timed + (round_s if cfg.aids.check else 0.0)
    return total


def stall_seconds(cfg: AlltoallConfig) -> float:
    """How long the ranks may go without a progress report before the run counts as stalled: the
    longest stretch between two reports (one size's warm-up or check, or one timed iteration) four
    times over, and never under two minutes plus 5 s a rank (start-up on a shared machine)."""
    topo = cfg.topology or {}
    gbps = topo.get("inter_gbps") or _UNSHAPED_GBPS
    rows = len(cfg.variants) * len(cfg.chunks) + 2
    longest = max(max(0.01, cfg.gpus_per_node * s * 8 / (gbps * 1e9)) * rows * max(1, cfg.warmup) for s in cfg.sizes)
    return max(120.0, 60.0 + 5.0 * cfg.nodes * cfg.gpus_per_node, 4 * longest)


def default_timeout(cfg: AlltoallConfig) -> float:
    """Twice the expected run time plus two minutes: a slow machine passes, a hung run does not wait
    the old fixed 20 minutes for a sweep of seconds (and a stalled rank is caught sooner still)."""
    return round(2 * expected_seconds(cfg) + 120.0)


def fixed_dilation(args: argparse.Namespace, cfg: AlltoallConfig) -> tuple[float | None, AlltoallConfig]:
    """--dilation checked (UsageError before anything runs): (None for auto, or the fixed factor), and
    the config on the fixed factor's clock."""
    import dataclasses

    from monta.bench import dilation
    from monta.emulate import Topology
    from monta.validate import UsageError

    try:
        factor = dilation.parse(args.dilation)
        if factor is None or factor == 1:
            return factor, cfg
        if args.launcher != "emulate":
            raise ValueError(f"--dilation {args.dilation}: only the emulator's links can be slowed; use --dilation 1")
        topo = Topology(**{k: v for k, v in cfg.topology.items() if k != "description"}).dilated(factor)
    except ValueError as e:
        text = str(e)
        raise UsageError(text if text.startswith("--") else f"--dilation {args.dilation}: {text}") from None
    return factor, dataclasses.replace(cfg, topology={**topo.to_dict(), "description": topo.describe()})


def launch_once(cfg: AlltoallConfig, args: argparse.Namespace, timeout: float) -> list[dict] | None:
    """One emulated launch of ``cfg``: its records (written by rank 0 to a file of its own, read back
    here), or None when the launch failed (said on stderr)."""
    import dataclasses
    import shutil

    from monta import tmpdirs
    from monta.emulate import EmulationError, Topology, launch
    from monta.results import read_records

    topo = Topology(**{k: v for k, v in cfg.topology.items() if k != "description"})
    tmpdirs.clean_stale()
    tmp = Path(tmpdirs.make("monta-a2a-"))
    try:
        out = tmp / "records.jsonl"
        (tmp / "config.json").write_text(dataclasses.replace(cfg, out=str(out), append=False).to_json())
        try:
            launch(
                [sys.executable, "-m", "monta.bench.alltoall.worker", str(tmp / "config.json")],
                args.nodes,
                args.gpus_per_node,
                topo,
                env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
                timeout_s=timeout,
                allow_unshaped=args.allow_unshaped,
                stall_s=stall_seconds(cfg),
                preload=ALLTOALL_PRELOAD,
            )
        except EmulationError as e:
            print(f"monta: error: {e}", file=sys.stderr)
            return None
        return read_records(out) if out.exists() else []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rerun_alone(cfg: AlltoallConfig, args: argparse.Namespace, size: int, factor: float):
    """``size`` alone at ``factor`` x the first try's clock: (its records, wall seconds), or None."""
    import dataclasses
    import time

    from monta.emulate import Topology

    topo = Topology(**{k: v for k, v in cfg.topology.items() if k != "description"}).dilated(factor)
    one = dataclasses.replace(cfg, sizes=(size,), topology={**topo.to_dict(), "description": topo.describe()})
    start = time.monotonic()
    recs = launch_once(one, args, args.timeout_given or default_timeout(one))
    return None if recs is None else (recs, time.monotonic() - start)


def stated(records: list[dict], cfg: AlltoallConfig) -> list[dict]:
    """The records as the user's run states them: its --out and --append (the launches wrote to files
    of their own)."""
    for r in records:
        r["config"].update(out=cfg.out, append=cfg.append)
    return records
