"""``monta predict published`` on a table of published MoE training steps (``data/published/steps.csv``, or any
file with the columns of ``/work/shared/data/published-steps.csv``: added columns are optional, an empty cell
is "not stated"). Nothing is keyed to a row id or a source: the command is the interface.

- **blind**: :func:`monta.perfmodel.training.run_step.price_run` on the row's model, layout, precision,
  routing and GPU, with the cluster file of its GPU (``monta.hardware.gpus``; NVL72 racks as one NVLink domain) and the
  NICs the row states.
- **calibrated** (leave one source out): the blind step re-priced with a factor on its compute and one on the
  rest of it from the forced-balance rows of OTHER sources on GPUs of the same generation, by the estimator a
  nested leave-one-source-out over those sources chooses (``published_steps_calibration``); null where there is
  none.
- **A/B pairs**: two priced rows with the same model, layout, metric and software that differ in exactly one
  setting (:data:`SETTINGS`): measured and predicted ratio (second over first).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from monta.hardware.gpus import cluster_of_gpu
from monta.perfmodel.reports.published_rows import NIC_LINE_RATE_FRACTION, Row, read_table
from monta.perfmodel.reports.published_steps_calibration import MIN_FIT_ROWS, _fit, calibrate  # noqa: F401
from monta.perfmodel.reports.published_steps_metric import (  # noqa: F401
    SAME,
    SETTINGS,
    _stats,
    _time_ratio,
    predict_value,
)
from monta.perfmodel.reports.published_steps_releases import (  # noqa: F401
    RECIPE_INPUTS,
    by_model,
    by_software,
    release_drift,
    release_steps,
)

EXPLAIN_ABOVE = 0.25
# The raw table's metric names -> the canonical metric; then per canonical metric the units it may be written in
# -> the factor to the canonical unit (s, tok/s/GPU, TFLOPS/GPU, %). An empty unit cell is the canonical unit.
METRICS = {
    "step_time_s": "step_time_s",
    "step_time": "step_time_s",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
    "tflops_per_gpu": "tflops_per_gpu",
    "mfu": "mfu",
}
UNITS = {
    "step_time_s": {"": 1.0, "s": 1.0, "ms": 1e-3},
    "tokens_per_s_per_gpu": {"": 1.0, "tok/s/gpu": 1.0, "tokens/s/gpu": 1.0},
    "tflops_per_gpu": {"": 1.0, "tflops/gpu": 1.0, "tflops": 1.0},
    "mfu": {"": 1.0, "%": 1.0, "fraction": 100.0},
}
STEP_COLUMNS = ("metric", "value", "gpu", "layers")


def is_step_table(path: str | Path) -> bool:
    """A step table has ``metric``, ``value``, ``gpu`` and ``layers`` and no ``collective`` column."""
    with Path(path).open(newline="") as f:
        head = next(csv.reader(f), [])
    return "collective" not in head and all(c in head for c in STEP_COLUMNS)


def read_step_rows(path: str | Path) -> list[Row]:
    return read_table(Path(path), ("id", *STEP_COLUMNS))


def metric_of(row: Row) -> tuple[str | None, float | None, str | None]:
    """(canonical metric, value in its canonical unit, None), or (metric, None, why) for a unit not known."""
    metric, value, unit = METRICS.get(row.text("metric").lower()), row.num("value"), row.text("unit")
    if metric is None or value is None:
        return metric, value, None
    factor = UNITS[metric].get(unit.lower())
    if factor is None:
        known = ", ".join(u for u in UNITS[metric] if u)
        return metric, None, f"unit {unit!r} of {row.text('metric')} is not one of {known}: convert the value"
    return metric, value * factor, None


def row_cluster(row: Row, gpus: int):
    """The cluster of a row's GPU and NICs for ``gpus`` GPUs, or (None, why)."""
    from monta.hardware.profile import get_cluster

    name = row.text("cluster") or cluster_of_gpu(row.text("gpu"))
    if name is None:
        return None, f"no cluster file for GPU {row.text('gpu') or '(not stated)'!r}: add a `cluster` column"
    base = get_cluster(name)
    gpn = max(d for d in range(1, min(base.gpus_per_node, gpus) + 1) if gpus % d == 0)
    nics = max(1, round(base.nics_per_node * gpn / base.gpus_per_node))
    c = replace(base.with_nodes(gpus // gpn, gpn), nics_per_node=nics)
    n, gbps = row.int("nics_per_node"), row.num("nic_gbps")
    if n and gbps and base.gpus_per_node <= 8:
        c = replace(c, nics_per_node=n, inter=replace(c.inter, bandwidth_GBps=gbps / 8 * NIC_LINE_RATE_FRACTION))
    return c, None


# Where a file has no precision or dispatcher column (the shared table's raw columns), the row's own words say
# it: the first pattern found in its system and notes (narrower first).
PRECISIONS = ((r"\bMXFP8\b|FP8[-_ ]MX", "mxfp8"), (r"FP8[- ]?blockwise", "fp8-blockwise"), (r"\bFP8", "fp8"),
              (r"\bBF16\b", "bf16"))  # fmt: skip
DISPATCHERS = ((r"HybridEP", "hybridep"), (r"DeepEP", "deepep"), (r"all-?to-?all", "alltoall"))


def _stated(row: Row, col: str, patterns) -> str:
    """The row's ``col``, else the first of ``patterns`` its system and notes name ('' for none)."""
    if row.text(col):
        return row.text(col).lower()
    words = row.text("system") + " " + row.text("notes")
    return next((v for pat, v in patterns if re.search(pat, words, re.IGNORECASE)), "")


def layout_of(row: Row):
    """(Layout, assumptions) from the row, or (None, why)."""
    from monta.perfmodel.training.run_step import Layout

    gpus, seq, gbs = row.int("gpus"), row.int("seq_len"), row.int("global_batch_tokens")
    if not gpus:
        return None, "GPU count not stated"
    if not seq or not gbs:
        return None, "sequence length or global batch not stated"
    said = []

    def deg(col: str) -> int:
        v = row.int(col)
        if v is None and col in ("tp", "pp", "ep", "micro_batch"):
            said.append(f"{col} not stated: 1 assumed")
        return v or 1

    routing = row.text("routing").lower() or ("real" if "real routing" in row.text("notes").lower() else "forced")
    precision, dispatcher = _stated(row, "precision", PRECISIONS), _stated(row, "dispatcher", DISPATCHERS)
    s = Layout(
        gpus=gpus, tp=deg("tp"), ep=deg("ep"), pp=deg("pp"), vpp=deg("vpp"), cp=deg("cp"),
        micro_batch=deg("micro_batch"), seq=seq, global_batch_tokens=gbs,
        precision=precision or "bf16", routing="real" if routing == "real" else "forced",
        recompute=row.text("recompute").lower(), dispatcher=dispatcher,
        a2a_overlap=row.text("a2a_overlap").lower() == "yes", cuda_graphs=row.text("cuda_graphs").lower(),
        pp_layout=row.text("pp_layout"), cross_entropy=row.text("cross_entropy").lower(),
        rope_fused=row.text("rope_fusion").lower() != "no",
    )  # fmt: skip
    why = s.check()
    return (None, why) if why else (s, said)


def blind(row: Row, compute_tables=()) -> dict[str, Any]:
    """One row's blind record (``_priced`` private: for calibration). A compute table measured on the row's GPU
    (``monta.perfmodel.training.measured_compute``) replaces its cluster's GEMM and attention efficiencies."""
    from monta.perfmodel.training.run_shape import run_model
    from monta.perfmodel.training.run_step import price_run

    metric, value, unit_why = metric_of(row)
    rec: dict[str, Any] = {"id": row.id, "source": row.source, "metric": metric or row.text("metric"),
                           "measured": value, "routing": "", "gpu": row.text("gpu"), "cluster": None,
                           "predicted_blind": None, "predicted_calibrated": None, "error_blind": None,
                           "error_calibrated": None, "assumed": [], "terms": {}, "reason": None,
                           "seen_by": row.text("seen_by"), "compute_table": None}  # fmt: skip
    if unit_why:
        rec["reason"] = unit_why
        return rec
    if metric is None or value is None:
        rec["reason"] = (
            f"metric {row.text('metric') or '(none)'!r} is not a step figure (step time, tokens/s/GPU, TFLOPS/GPU, MFU)"
        )
        return rec
    m, why = run_model(row.num, row.text)
    s, said = layout_of(row) if m is not None else (None, why)
    if m is None or s is None:
        rec["reason"] = why if m is None else said
        return rec
    rec["routing"] = s.routing if row.text("routing").lower() != "token-drop" else "token-drop"
    c, why = row_cluster(row, s.gpus)
    if c is None:
        rec["reason"] = why
        return rec
    if m.experts % s.ep:
        rec["reason"] = f"ep={s.ep} does not divide the {m.experts} experts"
        return rec
    table = next((t for t in compute_tables if t.cluster == c.name and t.fits(row.text("gpu"))), None)
    if table is not None:
        c, rec["compute_table"] = table.apply(c), table.path
    try:
        terms = price_run(m, s, c, row.num("maxvio"))
    except ValueError as e:  # a shape the exchange or routing models refuse: the row says why, the table goes on
        rec["reason"] = f"cannot be priced: {e}"
        return rec
    step_s = terms["total_us"] / 1e6
    rec.update(cluster=c.name, predicted_blind=predict_value(metric, step_s, m, s, c), assumed=[*m.assumed, *said])
    rec["terms"] = {(k[:-3] + "_s" if k.endswith("_us") else k): (v / 1e6 if k.endswith("_us") else v)
                    for k, v in terms.items()}  # fmt: skip
    rec["_priced"] = (m, s, c, step_s, terms)
    rec["error_blind"] = (rec["predicted_blind"] - value) / value
    return rec


def explain(row: Row, rec: dict) -> str:
    """Why a priced row's blind error is above EXPLAIN_ABOVE, from what the row and its terms say."""
    t, e = rec["terms"], rec["error_blind"]
    faster = (e > 0) == (rec["metric"] != "step_time_s")  # the model's step is shorter than the measured one
    said = " ".join(rec["assumed"])
    if rec["routing"] == "token-drop":
        return "token-drop run: the model prices dropless balanced routing" + (f"; {said}" if said else "")
    if said and not faster:
        return f"the model's step is longer; {said}"
    if said:
        return f"the model's step is shorter; {said}"
    if faster and t.get("host_floor_s", 0) == 0 and row.text("cuda_graphs").lower() in ("", "no"):
        return (
            "the model's step is shorter: more software overhead than it prices (kernel launches between the GPU's "
            "work, host-device syncs of dropless MoE, unfused kernels; the row names no CUDA graphs)"
        )
    if faster:
        return "the model's step is shorter: the GPU reaches less of its peak than the cluster file's efficiencies"
    if t.get("last_stage_s", 0) > 0.1 * t["total_s"] and not row.text("pp_layout"):  # a stated layout is priced
        return (
            f"the model's step is longer: {t['last_stage_s'] / t['total_s']:.0%} of it is the last pipeline stage's "
            "head and MTP layers (Megatron's default split); a run that rebalances its stages (a pipeline layout, "
            "DualPipe) the row does not state runs faster"
        )
    return "the model's step is longer: the run hides more communication or reaches more of its peak than priced"


def pairs(rows: list[Row], recs: list[dict]) -> list[dict]:
    """Every two priced rows that differ in exactly one of SETTINGS and agree on SAME and their software."""
    by_id = {r["id"]: r for r in recs}
    priced = [row for row in rows if by_id[row.id].get("_priced")]

    def key(row: Row) -> tuple:
        return (*(row.text(c).lower() for c in SAME), (row.text("software") or row.text("system")).lower())

    out = []
    for i, a in enumerate(priced):
        for b in priced[i + 1 :]:
            diff = [c for c in SETTINGS if a.text(c).lower() != b.text(c).lower()]
            if len(diff) != 1 or key(a) != key(b) or (diff[0] == "software"):
                continue
            ra, rb = by_id[a.id], by_id[b.id]
            meas, pred = rb["measured"] / ra["measured"], rb["predicted_blind"] / ra["predicted_blind"]
            cal = None
            if ra["predicted_calibrated"] is not None and rb["predicted_calibrated"] is not None:
                cal = rb["predicted_calibrated"] / ra["predicted_calibrated"]
            same_way = (abs(math.log(meas)) < 0.01 and abs(math.log(pred)) < 0.01) or (meas - 1) * (pred - 1) > 0
            out.append({"pair": f"{a.id} -> {b.id}", "setting": diff[0],
                        "change": f"{a.text(diff[0]) or '(not stated)'} -> {b.text(diff[0]) or '(not stated)'}",
                        "metric": ra["metric"], "measured_ratio": meas, "predicted_ratio": pred,
                        "predicted_ratio_calibrated": cal, "direction_right": same_way,
                        "ratio_error": pred / meas - 1, "seen": bool(ra["seen_by"] or rb["seen_by"])})  # fmt: skip
    return out


def price_steps(
    rows: list[Row],
    compute_tables=(),
    estimator: str | None = None,
    reference: list[Row] = (),
    same_source: list[set] = (),
) -> tuple[list[dict], list[dict]]:
    """Records per row (blind, calibrated, reasons) and per A/B pair; ``compute_tables``: measured
    ``ComputeTable``s, each used for the rows on its cluster; ``estimator``: the calibration's
    (``published_steps_calibration``; None: its default); ``reference``: another table's rows that calibrate
    these (leave one source out) and are not scored; ``same_source``: sets of source keys the calibration leaves
    out together."""
    recs = [blind(r, compute_tables) for r in rows]
    for row, r in zip(rows, recs):
        r["software"], r["model"] = row.text("software"), row.text("model")
    calibrate(recs, estimator, [blind(r, compute_tables) for r in reference], same_source)
    for row, r in zip(rows, recs):
        if r["error_blind"] is not None and abs(r["error_blind"]) > EXPLAIN_ABOVE:
            r["reason"] = explain(row, r)
    prs = pairs(rows, recs)
    for r in recs:
        r.pop("_priced", None)
        r.pop("_group", None)
    return recs, prs


def step_summary(recs: list[dict], prs: list[dict], rows: list[Row] = ()) -> dict[str, Any]:
    priced = [r for r in recs if r["predicted_blind"] is not None]
    forced = [r for r in priced if r["routing"] == "forced"]
    real = [r for r in priced if r["routing"] == "real"]
    return {
        "rows": len(recs),
        "sources": len({r["source"] for r in recs}),
        "priced_blind": len(priced),
        "priced_sources": len({r["source"] for r in priced}),
        "priced_calibrated": sum(r["predicted_calibrated"] is not None for r in recs),
        "forced_blind": _stats(r["error_blind"] for r in forced),
        "forced_calibrated": _stats(r["error_calibrated"] for r in forced),
        "real_blind": _stats(r["error_blind"] for r in real),
        "real_calibrated": _stats(r["error_calibrated"] for r in real),
        "all_blind": _stats(r["error_blind"] for r in priced),
        "all_calibrated": _stats(r["error_calibrated"] for r in priced),
        "pairs": len(prs),
        "pairs_direction_right": sum(p["direction_right"] for p in prs),
        "pair_ratio_error": _stats(p["ratio_error"] for p in prs),
        # the rows no term of the model was chosen with in view (``seen_by`` empty): the blind score proper
        "unseen_forced_blind": _stats(r["error_blind"] for r in forced if not r["seen_by"]),
        "unseen_forced_calibrated": _stats(r["error_calibrated"] for r in forced if not r["seen_by"]),
        "unseen_pairs": sum(not p["seen"] for p in prs),
        "unseen_pairs_direction_right": sum(p["direction_right"] and not p["seen"] for p in prs),
        "unseen_pair_ratio_error": _stats(p["ratio_error"] for p in prs if not p["seen"]),
        "by_software": by_software(forced),
        "by_model": by_model(forced),
        "release_drift": release_drift(list(rows), recs) if rows else None,
        "release_steps": release_steps(list(rows), recs) if rows else None,
        "pair_ratio_error_calibrated": _stats(
            p["predicted_ratio_calibrated"] / p["measured_ratio"] - 1
            for p in prs
            if p["predicted_ratio_calibrated"] is not None
        ),
    }
