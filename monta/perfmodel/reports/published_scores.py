"""The scores of ``monta predict published``: median absolute errors over the populations the issue asks for.

- **healthy nccl-tests rows** (the headline): all of them, and split by the file's ``seen`` mark: a row that shaped a
  model term (named on docs/results/published-measurements.md next to that term) is *seen*; the rest, and every row
  of a file without the column, are *unseen*. The unseen score is the one that says how the model generalises.
- **small and multi-node**: priced nccl-tests rows at <= 64 MiB on two or more nodes, where MoNTA's chunks live.
- blind, calibrated leaving one row out, and calibrated leaving the row's whole source out.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from monta.perfmodel.reports.published_rows import NCCL_TESTS

SMALL = 64 * 2**20


def healthy_nccl(rec: dict) -> bool:
    """The rows the headline errors are taken over: nccl-tests, healthy, priced."""
    return rec["collective"].strip().lower() in NCCL_TESTS and rec["health"] == "healthy"


def small_multinode(rec: dict) -> bool:
    """nccl-tests rows with a size of at most 64 MiB on two or more nodes (any health)."""
    size = rec.get("size_bytes")
    return (
        rec["collective"].strip().lower() in NCCL_TESTS
        and size is not None
        and size <= SMALL
        and (rec.get("nodes") or 0) >= 2
    )


def _med(xs) -> float | None:
    xs = [abs(x) for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else None


def _scores(rs: list[dict]) -> dict[str, Any]:
    return {
        "rows": len(rs),
        "priced_blind": sum(r["error_blind"] is not None for r in rs),
        "priced_calibrated": sum(r["error_calibrated"] is not None for r in rs),
        "priced_calibrated_loso": sum(r.get("error_calibrated_loso") is not None for r in rs),
        "median_blind_error": _med(r["error_blind"] for r in rs),
        "median_calibrated_error": _med(r["error_calibrated"] for r in rs),
        "median_calibrated_loso_error": _med(r.get("error_calibrated_loso") for r in rs),
    }


def summary(recs: list[dict]) -> dict[str, Any]:
    sel = [r for r in recs if healthy_nccl(r)]
    by_source: dict[str, list[dict]] = {}
    for r in recs:
        by_source.setdefault(r["source"], []).append(r)
    head = _scores(sel)
    return {
        "rows": len(recs),
        "sources": len(by_source),
        "priced_blind": sum(r["predicted_blind"] is not None for r in recs),
        "priced_calibrated": sum(r["predicted_calibrated"] is not None for r in recs),
        "healthy_nccl_rows": len(sel),
        "median_blind_error": head["median_blind_error"],
        "median_calibrated_error": head["median_calibrated_error"],
        "median_calibrated_loso_error": head["median_calibrated_loso_error"],
        "median_blind_error_all": _med(r["error_blind"] for r in recs),
        "populations": {
            "healthy nccl-tests rows": head,
            "healthy, seen": _scores([r for r in sel if r.get("seen")]),
            "healthy, unseen": _scores([r for r in sel if not r.get("seen")]),
            "<= 64 MiB on 2+ nodes": _scores([r for r in recs if small_multinode(r)]),
            "<= 64 MiB on 2+ nodes, healthy": _scores([r for r in recs if small_multinode(r) and healthy_nccl(r)]),
            "every priced row": _scores(recs),
        },
        "per_source": {
            s: {
                "rows": len(rs),
                "median_blind_error": _med(r["error_blind"] for r in rs),
                "median_calibrated_error": _med(r["error_calibrated"] for r in rs),
                "median_calibrated_loso_error": _med(r.get("error_calibrated_loso") for r in rs),
            }
            for s, rs in by_source.items()
        },
    }
