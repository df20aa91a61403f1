"""``monta calibrate --nccl-tests LOG... --records FILE...``: bring a cluster in from its nccl-tests output and
the pipeline's own AllToAll records.

Checks every row of each log (``ncclrows``: a bad one is named by file and line, exit 2), fits the model's
per-collective link curves to the logs (``monta.perfmodel.network.nccl_fit``), then each link class's rate
to the exchange records (``records_fit``), prints measured against fitted and a closing table of what was
fitted and what keeps the base's figure, exits 1 when a fit misses one of its measurements by more than
25%, and otherwise, with ``--out``, writes a cluster file (schema ``monta.cluster/1``). Imports no torch.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from monta.hardware.gpus import cluster_of_gpu

CLUSTER_SCHEMA = "monta.cluster/1"
MiB = 2**20


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit the model's link curves to nccl-tests logs of your cluster",
        description="Read nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf; "
        "one node for the NVLink curves, two or more for the NICs), fit the cost model's links to it, print "
        "measured vs fitted bus bandwidth and write a cluster file.",
    )
    p.add_argument("--nccl-tests", nargs="+", default=[], metavar="LOG", dest="logs", help="nccl-tests stdout files")
    p.add_argument(
        "--records",
        nargs="+",
        default=[],
        metavar="FILE",
        help="JSONL records of `monta bench alltoall` on this cluster: each link class's rate is fitted to their times",
    )
    p.add_argument(
        "--cluster",
        default=None,
        help="base cluster (name or file) for what the measurements do not set (NIC count, compute, other links); "
        "default: the preset of the GPU the logs name (a100, a800, h100, h800); for emulated records alone, "
        "a node of the records' shape with one NIC and rates unknown",
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
    from monta.perfmodel.network import nccl_fit
    from monta.perfmodel.reports import calibrate_table as T
    from monta.perfmodel.reports.records_fit import fit_records

    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:
        raise ValueError(f"{out} exists: pass --force to replace it, or choose another --out")
    if (args.nodes is None) != (args.gpus_per_node is None):
        raise ValueError("give --nodes and --gpus-per-node together (the shape of logs without '# Rank' lines)")
    if not args.logs and not args.records:
        raise ValueError("nothing to calibrate from: give --nccl-tests LOG... and/or --records FILE.jsonl...")
    logs, unpriced = _read_logs(args)
    if args.logs and not logs:  # said here: else the base falls back to "the records name no GPU", or fits nothing
        seen = ", ".join(f"{n} {c} rows" for c, n in sorted(unpriced.items())) or "no rows"
        raise ValueError(
            f"the logs hold {seen}: give nccl-tests logs of all_reduce, all_gather, reduce_scatter or alltoall"
        )
    records = _read_records(args.records)
    base, base_file = _base(args.cluster, logs, records)
    cal = nccl_fit.calibrate(base, logs) if logs else None
    rfit = fit_records(cal.cluster if cal else base, records) if records else None
    final = rfit.cluster if rfit else cal.cluster if cal else base
    if cal:
        print(report(cal, logs, base.name))
    if rfit:
        print(T.records_report(rfit))
    print(T.coverage(base, final, cal, rfit, unpriced))
    failed = T.failures(cal, rfit)
    if failed:
        print("\n".join(failed) + ("\nnothing written" if out else ""))
        return 1
    if out is not None and not fitted_keys(cal, rfit):
        raise ValueError(
            f"nothing was fitted: no link of {base.name} sets the logs' times (faster than its other links) and "
            f"no --records were given; give logs or records of the cluster itself ({out} not written)"
        )
    if out is not None:
        write_cluster(out, final, cal, rfit, logs, base_file, args.records, overwrite=args.force)
        print(f"wrote {out}")
    return 0


def _read_logs(args) -> tuple[list, dict[str, int]]:
    """Every log's rows checked (a bad row: file and line, exit 2), then its priced runs parsed; the rows of
    collectives the model does not price (broadcast, reduce, sendrecv...) counted per collective."""
    from monta.perfmodel.network import nccltests
    from monta.perfmodel.reports.ncclrows import UNPRICED, check_file

    logs, unpriced = [], {}
    for path in args.logs:
        checked = check_file(path, args.collective)
        for coll, n in checked.unpriced.items():
            unpriced[coll] = unpriced.get(coll, 0) + n
        if checked.rows == sum(checked.unpriced.values()) and checked.unpriced:
            continue  # only collectives the model does not price
        collective = args.collective if args.collective not in UNPRICED else None
        for log in nccltests.parse(checked.text, source=path, collective=collective):
            if not log.devices and args.nodes:
                log.nodes_hint, log.nranks_hint = args.nodes, args.nodes * args.gpus_per_node
            logs.append(log)
    return logs, unpriced


def _read_records(paths: list[str]) -> list[dict]:
    from monta.results import read_records

    return read_records(*paths) if paths else []


def _base(spec: str | None, logs, records):
    """The base cluster and the cluster file it comes from (None for the emulator's unknown node)."""
    from monta.hardware.profile import get_cluster
    from monta.perfmodel.reports.records_fit import emulator_base

    if spec is None and not logs:
        if records and all(r.get("source") == "emulated" for r in records if r.get("kind") == "alltoall"):
            return emulator_base(records), None
        raise ValueError("the records name no GPU: pass --cluster NAME|FILE.yaml, the node type they ran on")
    spec = spec or _preset_for(logs)
    if spec.startswith("emulator:") or spec.endswith(".json"):
        raise ValueError(
            f"--cluster {spec}: calibrate fits a cluster file's links (a name or FILE.yaml); for emulated "
            "records leave --cluster out"
        )
    return get_cluster(spec), spec


def _preset_for(logs) -> str:
    gpus = {log.gpu for log in logs if log.gpu}
    # The GPU model strings of nccl-tests' "# Rank" lines -> the cluster file of their node type (one for all).
    presets = {cluster_of_gpu(gpu) for gpu in gpus}
    if len(presets) == 1 and None not in presets:
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


def calibration_notes(cal, rfit, logs, record_paths) -> dict:
    """What the fit saw and how well it reproduced it: the ``calibration`` block of the written file."""
    residuals: dict = {}
    for fit in cal.fits if cal else []:
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
    notes = {"logs": runs, "residuals": residuals}
    if rfit is not None:
        notes["records"] = {
            "paths": [str(p) for p in record_paths],
            "scales": {c: (round(s, 6) if s is not None else None) for c, s in rfit.scales.items()},
            "mape": round(rfit.mape, 4),
            "max_abs_error": round(rfit.worst, 4),
            "points": [[p.variant, p.size_bytes, str(p.chunks), round(p.time_us, 1), round(e, 4)]
                       for p, e in zip(rfit.points, rfit.errors)],
        }  # fmt: skip
    return notes


def fitted_keys(cal, rfit) -> list[str]:
    """The cluster-file keys the log fit and the records fit set (empty: the base unchanged)."""
    fitted = sorted({f"collectives.{f.op}.{f.cls}" for f in (cal.fits if cal else []) if f.link is not None})
    scaled = {"nvlink.bandwidth_GBps": "intra", "nic.bandwidth_GBps": "inter"}
    return fitted + [k for k, cls in scaled.items() if rfit is not None and rfit.scales.get(cls) is not None]


def write_cluster(path: Path, cluster, cal, rfit, logs, base_file, record_paths=(), overwrite: bool = False) -> Path:
    """The calibrated cluster as a cluster file (``clusterfile.dump``: atomic, read back before it replaces
    anything): the base's node type, every fitted link, and the calibration notes."""
    from dataclasses import replace

    from monta.hardware.clusterfile import dump

    fitted = fitted_keys(cal, rfit)
    what = [f"{len(logs)} nccl-tests runs: {', '.join(str(x.source) for x in logs)}"] if logs else []
    what += [f"exchange records: {', '.join(str(p) for p in record_paths)}"] if rfit else []
    note = f"fitted by monta calibrate ({'; '.join(what)})"
    cluster = replace(cluster, name=f"{Path(base_file or 'unknown').stem}-calibrated")  # clusters/h100.yaml -> h100
    described = f"{base_file} with links fitted" if base_file else "a cluster known only by its records"
    if not base_file:  # no base file: the node's other figures are the model's defaults, and say so
        unmeasured = "not measured: the model's default (only the links were fitted, from the records)"
        fitted += [f"gpu.{k}" for k in ("peak_tflops", "gemm_eff", "attn_eff", "mem_GB", "hbm_GBps", "copy_GBps")]
        note_for = dict.fromkeys(fitted, note) | {k: unmeasured for k in fitted if k.startswith("gpu.")}
    else:
        note_for = dict.fromkeys(fitted, note)
    return dump(
        cluster,
        path,
        overwrite=overwrite,
        base=base_file,
        description=f"{described} by monta calibrate",
        sources={**note_for, **({"nodes": note} if cluster.nodes > 1 else {})},
        extra={"calibration": calibration_notes(cal, rfit, logs, record_paths)},
    )
