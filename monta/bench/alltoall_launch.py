"""How ``monta bench alltoall`` launches its sweep on the emulator: once, then (``--dilation auto``) each
CPU-bound size again alone on a slower clock (``monta.bench.dilation`` decides which and how slow), and
``--dilation F``'s clock from the start. Rank 0 writes each launch's records to a file of its own; the
bench writes the final ones to --out at once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from monta.bench.alltoall import default_timeout, stall_seconds
from monta.bench.alltoall_config import AlltoallConfig


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
                [sys.executable, "-m", "monta.bench.alltoall_worker", str(tmp / "config.json")],
                args.nodes,
                args.gpus_per_node,
                topo,
                env={"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"},
                timeout_s=timeout,
                allow_unshaped=args.allow_unshaped,
                stall_s=stall_seconds(cfg),
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
