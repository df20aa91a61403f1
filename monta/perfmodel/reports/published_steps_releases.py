"""What a step table's software releases say (``monta predict published``): the signed error per release and per
model (:func:`by_software`, :func:`by_model`), one configuration across releases (:func:`release_drift`) and one
layout from one release to the next with the recipe inputs the rows state (:func:`release_steps`).
"""

from __future__ import annotations

import re
import statistics
from typing import Any

from monta.perfmodel.reports.published_rows import Row
from monta.perfmodel.reports.published_steps_metric import SAME, SETTINGS, _stats

MIN_RELEASE_ROWS = 3  # forced-balance rows a software release needs for its own line in by_software


def by_software(forced: list[dict]) -> dict[str, dict[str, Any]]:
    """Per software release with MIN_RELEASE_ROWS priced forced-balance rows: the median SIGNED blind error
    (positive: the model's throughput is higher, its step shorter) and its calibrated one. Each release's
    median is over its own rows, which differ from release to release: :func:`release_drift` compares one
    configuration across releases (docs/results/published-steps.md, "Software releases")."""
    out: dict[str, dict[str, Any]] = {}
    for rel in sorted({r.get("software") or "" for r in forced} - {""}):
        rs = [r for r in forced if r.get("software") == rel]
        if len(rs) >= MIN_RELEASE_ROWS:
            cal = [r["error_calibrated"] for r in rs if r["error_calibrated"] is not None]
            out[rel] = {"n": len(rs), "median_signed_blind": statistics.median(r["error_blind"] for r in rs),
                        "median_signed_calibrated": statistics.median(cal) if cal else None}  # fmt: skip
    return out


def by_model(forced: list[dict]) -> dict[str, dict[str, Any]]:
    """Per model (the ``model`` column) with MIN_RELEASE_ROWS priced forced-balance rows: their number, the
    median signed blind error over them, and the same per software release where the release has
    MIN_RELEASE_ROWS of its rows (``by_release``): which model the step model misses, release by release."""
    out: dict[str, dict[str, Any]] = {}
    for model in sorted({r.get("model") or "" for r in forced} - {""}):
        rs = [r for r in forced if r.get("model") == model]
        if len(rs) < MIN_RELEASE_ROWS:
            continue
        per = {rel: statistics.median(r["error_blind"] for r in rs if r.get("software") == rel)
               for rel in {r.get("software") or "" for r in rs} - {""}
               if sum(r.get("software") == rel for r in rs) >= MIN_RELEASE_ROWS}  # fmt: skip
        out[model] = {"n": len(rs), "median_signed_blind": statistics.median(r["error_blind"] for r in rs),
                      "by_release": dict(sorted(per.items()))}  # fmt: skip
    return out


def _release(software: str) -> tuple[str, tuple[int, ...]]:
    """(the software's name without its numbers, its numbers in order): 'Megatron-Bridge 26.02.01' ->
    ('megatron-bridge', (26, 2, 1)), so releases of one product sort by version."""
    return re.sub(r"[\d.]+", "", software).strip().lower(), tuple(int(x) for x in re.findall(r"\d+", software))


def _by_release(rows: list[Row], recs: list[dict], cols: tuple[str, ...]) -> list[list[tuple]]:
    """The priced forced-balance rows with a software release, grouped by the software's name and ``cols`` (an
    unstated VP is 1): per group, (version, row, record) in the file's order."""
    by_id = {r["id"]: r for r in recs}
    groups: dict[tuple, list[tuple]] = {}
    for row in rows:
        r = by_id[row.id]
        if r["error_blind"] is None or r["routing"] != "forced" or not r.get("software"):
            continue
        name, version = _release(r["software"])
        key = tuple((row.text(c) or ("1" if c == "vpp" else "")).lower() for c in cols)
        groups.setdefault((name, *key), []).append((version, row, r))
    return list(groups.values())


def release_drift(rows: list[Row], recs: list[dict]) -> dict[str, Any] | None:
    """One configuration (every column of SAME and SETTINGS alike) measured under two or more releases of one
    software: its signed blind error under the earliest and under the latest, medians over the configurations
    (None: no configuration was). The release medians of :func:`by_software` average different rows; this
    compares like with like."""
    spans = []  # (error under the earliest release, under the latest)
    for g in _by_release(rows, recs, (*SAME, *SETTINGS)):
        errs = sorted((version, r["error_blind"]) for version, _, r in g)
        if len({v for v, _ in errs}) > 1:
            spans.append((errs[0][1], errs[-1][1]))
    if not spans:
        return None
    return {"configurations": len(spans), "earliest": statistics.median(a for a, _ in spans),
            "latest": statistics.median(b for _, b in spans),
            "change": statistics.median(b - a for a, b in spans)}  # fmt: skip


# The settings a run's software recipe chooses (Megatron-Bridge's configs set them; its pages do not print them)
RECIPE_INPUTS = ("dispatcher", "a2a_overlap", "recompute", "cuda_graphs")


def release_steps(rows: list[Row], recs: list[dict]) -> dict[str, Any] | None:
    """One layout (SAME and the SETTINGS a recipe does not choose: GPU, precision, routing, GPUs) measured under
    consecutive releases of one software: per step from one release to the next, the measured and the predicted
    ratio (later / earlier, in the rows' metric) and whether the rows state different RECIPE_INPUTS. Where the
    stated inputs are the same, the model's ratio is 1 and the measured one is what the software alone changed;
    where they differ, the step is scored like an A/B pair (direction, ratio error); where neither row states them,
    both are priced alike and the measured change is the software's and its unstated inputs' together. None: no
    layout was measured under two releases. A row's inputs are what the row states; a step where only one row
    states them is left out and counted (``one_side_stated``: "not stated" is not "none").
    tools/bridge_recipe_inputs.py states Megatron-Bridge's."""
    steps, skipped = [], 0
    for g in _by_release(rows, recs, (*SAME, *(c for c in SETTINGS if c not in RECIPE_INPUTS))):
        g.sort(key=lambda t: t[0])  # by version; rows of one release keep the file's order
        for (va, ra, a), (vb, rb, b) in zip(g, g[1:]):
            if va == vb:
                continue  # two rows of one layout in one release: the later one starts the next step
            if any(ra.text(c) for c in RECIPE_INPUTS) != any(rb.text(c) for c in RECIPE_INPUTS):
                skipped += 1  # one row states its recipe's inputs, the other does not: not comparable
                continue
            meas, pred = b["measured"] / a["measured"], b["predicted_blind"] / a["predicted_blind"]
            changed = [c for c in RECIPE_INPUTS if ra.text(c).lower() != rb.text(c).lower()]
            stated = any(ra.text(c) for c in RECIPE_INPUTS)
            steps.append({"from": a["id"], "to": b["id"], "releases": f"{a['software']} -> {b['software']}",
                          "model": a.get("model") or "", "gpu": a["gpu"], "inputs_changed": changed,
                          "inputs_stated": stated,
                          "change": "; ".join(f"{c} {ra.text(c) or '-'} -> {rb.text(c) or '-'}" for c in changed),
                          "measured_ratio": meas, "predicted_ratio": pred, "ratio_error": pred / meas - 1,
                          "direction_right": (meas - 1) * (pred - 1) > 0 if changed else None})  # fmt: skip
    if not steps:
        return None
    same = [t for t in steps if t["inputs_stated"] and not t["inputs_changed"]]
    unstated = [t for t in steps if not t["inputs_stated"]]
    moved = [t for t in steps if t["inputs_changed"]]
    return {"steps": steps, "one_side_stated": skipped,
            "same_inputs": {"n": len(same), "measured_change": _stats(t["measured_ratio"] - 1 for t in same),
                            "largest_change": max((abs(t["measured_ratio"] - 1) for t in same), default=None),
                            "predicted_change": _stats(t["predicted_ratio"] - 1 for t in same)},
            "not_stated": {"n": len(unstated), "measured_change": _stats(t["measured_ratio"] - 1 for t in unstated)},
            "changed_inputs": {"n": len(moved), "direction_right": sum(t["direction_right"] for t in moved),
                               "ratio_error": _stats(t["ratio_error"] for t in moved)}}  # fmt: skip
