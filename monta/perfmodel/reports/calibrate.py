"""``monta calibrate --nccl-tests LOG...``: bring a GPU cluster in from its nccl-tests output.

Parses each log (``monta.perfmodel.network.nccltests``), fits the model's per-collective link curves
(``monta.perfmodel.network.nccl_fit``), prints measured against fitted bus bandwidth and the fitted
links, and with ``--out`` writes a cluster file (schema ``monta.cluster/1``). Imports no torch.
"""

from __future__ import annotations

import statistics
from pathlib import Path

CLUSTER_SCHEMA = "monta.cluster/1"
MiB = 2**20
# GPU model strings in nccl-tests' "# Rank" lines -> the preset whose node type they belong to.
_GPU_PRESETS = (("H100", "h100"), ("H800", "h800"), ("A800", "a800"), ("A100", "a100"))


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit the model's link curves to nccl-tests logs of your cluster",
        description="Read nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf; "
        "one node for the NVLink curves, two or more for the NICs), fit the cost model's links to it, print "
        "measured vs fitted bus bandwidth and write a cluster file.",
    )
    p.add_argument("--nccl-tests", nargs="+", required=True, metavar="LOG", dest="logs", help="nccl-tests stdout files")
    p.add_argument(
        "--cluster",
        default=None,
        help="base preset for what the logs do not measure (NIC count, compute, other links); "
        "default: the preset of the GPU the logs name (a100, a800, h100, h800)",
    )
    p.add_argument("--out", default=None, help="write the calibrated cluster here (YAML, schema monta.cluster/1)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument(
        "--collective", default=None, help="the binary of logs that do not say it (all_reduce, alltoall, ...)"
    )
    p.add_argument("--nodes", type=int, default=None, help="node count of logs without '# Rank ... on HOST' lines")
    p.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node of such logs")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from monta.perfmodel.network import nccl_fit, nccltests
    from monta.perfmodel.network.profile import get_cluster

    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:
        raise ValueError(f"{out} exists: pass --force to replace it, or choose another --out")
    if (args.nodes is None) != (args.gpus_per_node is None):
        raise ValueError("give --nodes and --gpus-per-node together (the shape of logs without '# Rank' lines)")
    logs = []
    for path in args.logs:
        for log in nccltests.parse_file(path, args.collective):
            if not log.devices and args.nodes:
                log.nodes_hint, log.nranks_hint = args.nodes, args.nodes * args.gpus_per_node
            logs.append(log)
    base = get_cluster(args.cluster or _preset_for(logs))
    cal = nccl_fit.calibrate(base, logs)
    print(report(cal, logs, base.name))
    if out is not None:
        write_cluster(out, cal, logs, base.name, overwrite=args.force)
        print(f"wrote {out}")
    return 0


def _preset_for(logs) -> str:
    gpus = {log.gpu for log in logs if log.gpu}
    presets = {preset for gpu in gpus for key, preset in _GPU_PRESETS if key in gpu.upper()}
    if len(presets) == 1 and all(any(k in g.upper() for k, _ in _GPU_PRESETS) for g in gpus):
        return presets.pop()
    named = ", ".join(sorted(gpus)) or "no GPU"
    raise ValueError(f"the logs name {named}: pass --cluster PRESET (a100, a800, h100, h800) as the base")


def _fmt_size(n: float) -> str:
    for unit, div in (("G", 2**30), ("M", MiB), ("K", 2**10)):
        if n >= div and n % div == 0:
            return f"{int(n // div)}{unit}"
    return str(int(n))


def report(cal, logs, base_name: str) -> str:
    """One table: per log its collective and shape, then per size measured vs fitted busbw; then the links."""
    lines = [f"calibrating {base_name} from {len(logs)} nccl-tests run(s)"]
    by_source = {}
    for fit in cal.fits:
        for r in fit.residuals:
            by_source.setdefault((r.source, fit.op), []).append((fit.cls, r))
    lines.append(f"{'log / size':>24} {'busbw meas':>11} {'busbw fit':>10} {'error':>8}  link")
    for log in logs:
        shape = f"{log.nodes} x {log.gpus_per_node}"
        lines.append(f"{Path(log.source).name}: {log.collective}, {log.ranks} ranks, {shape}, {log.gpu or 'GPU ?'}")
        for cls, r in by_source.get((log.source, log.op), []):
            mark = " (other link sets it)" if r.hidden else ""
            lines.append(
                f"{_fmt_size(r.size_bytes):>24} {r.measured_busbw:>11.2f} {r.fitted_busbw:>10.2f} "
                f"{100 * r.error:>+7.1f}%  {cls}{mark}"
            )
    lines.append("")
    head = f"{'collective':>13} {'link':>5} {'GB/s':>8} {'lat us':>7} {'max|err|>=1M':>13}"
    lines.append(f"{head}  efficiency (size:eff)")
    for fit in cal.fits:
        errs = [abs(e) for e in fit.errors(MiB)]
        worst = f"{100 * max(errs):.1f}%" if errs else "-"
        if fit.link is None:
            lines.append(f"{fit.op:>13} {fit.cls:>5} {'(not set by these sizes: base link kept)':>30}")
            continue
        curve = " ".join(f"{_fmt_size(s)}:{e:.2f}" for s, e in fit.link.efficiency)
        link = fit.link
        lines.append(
            f"{fit.op:>13} {fit.cls:>5} {link.bandwidth_GBps:>8.1f} {link.latency_us:>7.1f} {worst:>13}  {curve}"
        )
    return "\n".join(lines)


def calibration_notes(cal, logs) -> dict:
    """What the fit saw and how well it reproduced it: the ``calibration`` block of the written file."""
    residuals: dict = {}
    for fit in cal.fits:
        errs = [abs(e) for e in fit.errors(MiB)]
        residuals.setdefault(fit.op, {})[fit.cls] = {
            "fitted": fit.link is not None,
            "max_abs_error_ge_1MiB": round(max(errs), 4) if errs else None,
            "median_abs_error_ge_1MiB": round(statistics.median(errs), 4) if errs else None,
            "points": [[r.size_bytes, round(r.measured_busbw, 3), round(r.fitted_busbw, 3)] for r in fit.residuals],
        }
    runs = [
        {"path": str(log.source), "collective": log.collective, "ranks": log.ranks, "nodes": log.nodes,
         "gpus_per_node": log.gpus_per_node, "gpu": log.gpu}
        for log in logs
    ]  # fmt: skip
    return {"logs": runs, "residuals": residuals}


def write_cluster(path: Path, cal, logs, base_name: str, overwrite: bool = False) -> Path:
    """The calibrated cluster as a cluster file (``clusterfile.dump``: atomic, read back before it replaces
    anything): the base's node type, every fitted per-collective link, and the calibration notes."""
    from dataclasses import replace

    from monta.perfmodel.network.clusterfile import dump

    fitted = sorted({f"collectives.{f.op}.{f.cls}" for f in cal.fits if f.link is not None})
    note = f"fitted by monta calibrate --nccl-tests ({len(logs)} runs: {', '.join(str(x.source) for x in logs)})"
    cluster = replace(cal.cluster, name=f"{base_name}-calibrated")
    return dump(
        cluster,
        path,
        overwrite=overwrite,
        base=base_name,
        description=f"{base_name} with link curves fitted to nccl-tests logs",
        sources={**{k: note for k in fitted}, **({"nodes": note} if cluster.nodes > 1 else {})},
        extra={"calibration": calibration_notes(cal, logs)},
    )
