"""``monta predict published``: price measurements made elsewhere, row by row, blind and calibrated.

Input: a CSV with the columns of ``data/published/collectives.csv`` (``data/published/README.md``): ``id``,
``collective`` (an nccl-tests binary name or a MoE library's kernel), the hardware as the source states it
(``gpu``, ``nodes``, ``gpus_per_node``, ``nic_per_node``, ``nic_gbps``; optional ``cluster``: a cluster file name
or path that replaces them) and the measurement (``busbw_GBps``, ``algbw_GBps`` or ``time_us``; ``metric`` names
which one when several are filled; ``size_bytes``). Nothing here is keyed to a row id or a source: the command
is the interface, so a file the project has never seen is priced the same way.

- **blind**: the model on a cluster built from the row's hardware alone: the cluster file of its GPU
  (:func:`gpu_file`, ``monta.hardware.gpus``; NVLink, compute), its nodes and GPUs per node, its NICs and
  their rate (each NIC at :data:`NIC_LINE_RATE_FRACTION` of its line rate).
- **calibrated**: the same cluster with its link curves fitted (``monta calibrate``'s fit,
  :mod:`monta.perfmodel.network.nccl_fit`) on the OTHER rows of the same hardware and node count (same GPU
  file, GPUs per node, NICs and rate; single-node rows fit NVLink, multi-node rows the NICs) that their
  sources call healthy (:data:`CALIBRATE_FROM`); null where there is no such row.

Every null prediction, and every row whose blind error is above :data:`EXPLAIN_ABOVE`, carries a ``reason``
derived from the row itself (its health, notes, hardware columns, size), never from its id.
"""

from __future__ import annotations

from typing import Any

from monta.hardware.links import Cluster
from monta.perfmodel.reports.published_rows import (  # noqa: F401  (re-exported: the command's interface)
    EXPLAIN_ABOVE,
    HEALTHY,
    NCCL_TESTS,
    NIC_LINE_RATE_FRACTION,
    PLATEAU_BYTES,
    Row,
    blind_cluster,
    gpu_file,
    kernel_kind,
    predict_row,
    read_rows,
)


def explain(row: Row, cluster: Cluster | None, measured: float, predicted: float) -> str:
    """Why a row's blind prediction is off by more than EXPLAIN_ABOVE, from what the row says."""
    notes = row.text("notes")
    low = (notes + " " + row.text("nvlink")).lower()
    err = (predicted - measured) / measured
    health = row.health
    if health not in HEALTHY:
        return f"the source marks it {health}" + (f": {notes[:120]}" if notes else "")
    size = row.num("size_bytes")
    if size is not None and size < 64 * 2**20 and err > 0:
        return (
            "below 64 MiB NCCL's latencies set much of the time: the model's are NCCL's own tuner constants (made for "
            "InfiniBand), and a fabric or setup that posts more slowly shows here (calibrate on this cluster's logs)"
        )
    if "nvls" in low or "sharp" in low:
        return "NVLS / SHARP reduces in the switch: its busbw is not a wire rate (where the model has no NVLS: a ring)"
    kind = kernel_kind(row.text("collective"))
    if kind == "moe-normal" and cluster is not None and cluster.nodes > 2 and err < 0:
        return "node-deduplicated RDMA (DeepEP): bytes counted per GPU exceed its NIC share"
    if kind == "moe-normal":
        return "a MoE kernel's bottleneck bandwidth: the kernel's own efficiency is not in the model"
    if size is not None and size < 2**20:
        return "below 1 MiB: latency-bound; the model has NCCL's tuner latencies, not this cluster's own"
    if size is None:
        return "a plateau figure without its size: priced at 8 GiB"
    if cluster is not None and cluster.nodes > 1 and row.text("collective").lower() == "all_reduce_perf":
        wire = cluster.nics_per_node * (row.num("nic_gbps") or 0) / 8
        if err < 0 and wire and measured > wire:
            return f"busbw {measured:g} GB/s above the stated NICs' line rate ({wire:g} GB/s): not a ring over them"
    if err > 0:
        return "the model over-predicts: this setup reaches less than its NICs at 94% of line rate and its GPU's NVLink"
    return "the model under-predicts: this setup beats its NICs at 94% of line rate and its GPU's NVLink"


def price(rows: list[Row]) -> list[dict[str, Any]]:
    """One record per row: measured, blind and calibrated predictions (leave one row out, leave its source out),
    errors, reasons, and the row's ``seen`` mark when the file has one (it changes no prediction)."""
    from monta.perfmodel.reports.published_calibration import Calibrations

    built = [(r, *blind_cluster(r)) for r in rows]
    cal = Calibrations(built)
    out = []
    for r, c, why in built:
        m = r.metric()
        rec: dict[str, Any] = {
            "id": r.id,
            "source": r.source,
            "collective": r.text("collective"),
            "health": r.health,
            "seen": r.text("seen"),
            "metric": m[0] if m else None,
            "measured": m[1] if m else None,
            "size_bytes": r.num("size_bytes"),
            "nodes": c.nodes if c is not None else r.int("nodes"),
            "cluster": c.name if c is not None else None,
            "predicted_blind": None,
            "predicted_calibrated": None,
            "predicted_calibrated_loso": None,
            "error_blind": None,
            "error_calibrated": None,
            "error_calibrated_loso": None,
            "reason": why,
        }
        if c is not None:
            blind, why = predict_row(r, c)
            rec["predicted_blind"], rec["reason"] = blind, why
            if blind is not None:
                rec.update(cal.predict(r, c))
        if rec["measured"] and rec["predicted_blind"] is not None:
            rec["error_blind"] = (rec["predicted_blind"] - rec["measured"]) / rec["measured"]
            if abs(rec["error_blind"]) > EXPLAIN_ABOVE:
                rec["reason"] = explain(r, c, rec["measured"], rec["predicted_blind"])
        for k in ("", "_loso"):
            if rec["measured"] and rec[f"predicted_calibrated{k}"] is not None:
                rec[f"error_calibrated{k}"] = (rec[f"predicted_calibrated{k}"] - rec["measured"]) / rec["measured"]
        out.append(rec)
    return out


def summary(recs: list[dict]) -> dict[str, Any]:
    """The scores (``published_scores``): blind and calibrated, seen and unseen rows, small multi-node rows."""
    from monta.perfmodel.reports.published_scores import summary as _summary

    return _summary(recs)


def healthy_nccl(rec: dict) -> bool:
    from monta.perfmodel.reports.published_scores import healthy_nccl as _healthy

    return _healthy(rec)
