"""``monta predict published --data STEPS.csv``: the tables and records of a published-steps table
(``monta.perfmodel.reports.published_steps`` prices it; ``published_cli`` dispatches here by the columns)."""

from __future__ import annotations

import json
from pathlib import Path

from monta.perfmodel.reports.published_steps import (
    EXPLAIN_ABOVE,
    is_step_table,
    price_steps,
    read_step_rows,
    step_summary,
)
from monta.perfmodel.reports.published_steps_calibration import DEFAULT_ESTIMATOR, ESTIMATORS


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:+.0f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _band(st: dict) -> str:
    if not st["n"]:
        return "-"
    return f"{st['median'] * 100:.0f}% (IQR {st['q1'] * 100:.0f}-{st['q3'] * 100:.0f}%, n={st['n']})"


def headline(s: dict) -> str:
    return (
        f"{s['rows']} rows from {s['sources']} sources; priced blind {s['priced_blind']} (from {s['priced_sources']} "
        f"sources), calibrated {s['priced_calibrated']}. Median abs. error, forced-balance rows: blind "
        f"{_band(s['forced_blind'])}, calibrated (leave one source out) {_band(s['forced_calibrated'])}; "
        f"real-routing rows: blind {_band(s['real_blind'])}, calibrated {_band(s['real_calibrated'])}. "
        f"A/B pairs: {s['pairs_direction_right']} of {s['pairs']} in the measured direction, ratio error "
        f"{_band(s['pair_ratio_error'])} (calibrated: {_band(s['pair_ratio_error_calibrated'])}). Rows no term was "
        f"chosen with in view (`seen_by` empty): forced-balance blind {_band(s['unseen_forced_blind'])}, calibrated "
        f"{_band(s['unseen_forced_calibrated'])}; pairs {s['unseen_pairs_direction_right']} of {s['unseen_pairs']} "
        f"in direction, ratio error {_band(s['unseen_pair_ratio_error'])}."
    )


def release_steps_section(steps: dict | None) -> list[str]:
    """The release steps' paragraph and table (``published_steps_releases.release_steps``), or nothing."""
    from tabulate import tabulate

    if not steps:
        return []
    same, moved, unstated = steps["same_inputs"], steps["changed_inputs"], steps["not_stated"]
    parts = [
        f"One layout from one release to the next ({len(steps['steps'])} steps; the recipe inputs: dispatcher, "
        "A2A overlap, recompute, CUDA graphs)."
    ]
    if same["n"]:
        parts.append(
            f"The same inputs stated on both sides ({same['n']} steps): the measured throughput moved by a median "
            f"|change| of {_band(same['measured_change'])}, at most {same['largest_change'] * 100:.0f}%, the "
            f"model's by {_band(same['predicted_change'])}: the software alone."
        )
    if moved["n"]:
        parts.append(
            f"Different inputs stated ({moved['n']} steps): {moved['direction_right']} of {moved['n']} in the "
            f"measured direction, ratio error {_band(moved['ratio_error'])}."
        )
    if unstated["n"]:
        parts.append(
            f"Inputs stated on neither side ({unstated['n']} steps): the measured throughput moved by a median "
            f"|change| of {_band(unstated['measured_change'])}, the software and its unstated inputs together."
        )
    if steps["one_side_stated"]:
        parts.append(f"Left out: {steps['one_side_stated']} steps where only one release's row states its inputs.")
    return [
        " ".join(parts),
        "",
        tabulate([[t["releases"], t["model"], t["gpu"],
                   t["change"] or ("same inputs" if t["inputs_stated"] else "not stated"),
                   f"{t['measured_ratio']:.3f}", f"{t['predicted_ratio']:.3f}", _pct(t["ratio_error"])]
                  for t in steps["steps"]],
                 ["releases", "model", "gpu", "stated inputs", "measured ratio", "predicted ratio", "ratio err"],
                 tablefmt="github", disable_numparse=True),
        "",
    ]  # fmt: skip


def markdown(data: str, recs: list[dict], prs: list[dict], summ: dict) -> str:
    from tabulate import tabulate

    rows = [[r["id"], r["source"], r["gpu"], r["routing"] or "-", r["metric"], _num(r["measured"]),
             _num(r["predicted_blind"]), _pct(r["error_blind"]), _num(r["predicted_calibrated"]),
             _pct(r["error_calibrated"]), r["reason"] or ""] for r in recs]  # fmt: skip
    head = ["id", "source", "gpu", "routing", "metric", "measured", "blind", "err", "calibrated", "err", "reason"]
    pair_rows = [[p["pair"], p["setting"], p["change"], f"{p['measured_ratio']:.3f}", f"{p['predicted_ratio']:.3f}",
                  _pct(p["ratio_error"]), "yes" if p["direction_right"] else "no"] for p in prs]  # fmt: skip
    rel = summ.get("by_software") or {}
    release_table = ["Signed blind error by software release (median over its forced-balance rows; + : the model "
                     "is faster than the release ran):", "",
                     tabulate([[k, v["n"], _pct(v["median_signed_blind"]), _pct(v["median_signed_calibrated"])]
                               for k, v in rel.items()], ["software", "rows", "blind", "calibrated"],
                              tablefmt="github", disable_numparse=True), ""] if len(rel) >= 2 else []  # fmt: skip
    models = summ.get("by_model") or {}
    if len(models) >= 2:
        rels = [k for k in rel if any(k in v["by_release"] for v in models.values())]
        release_table += [
            "Signed blind error by model (median over its forced-balance rows, and per release with three or more "
            "of them):",
            "",
            tabulate([[m, v["n"], _pct(v["median_signed_blind"]), *(_pct(v["by_release"].get(k)) for k in rels)]
                      for m, v in models.items()], ["model", "rows", "blind", *rels], tablefmt="github",
                     disable_numparse=True),
            "",
        ]  # fmt: skip
    drift = summ.get("release_drift")
    if drift:
        release_table += [
            f"The same configuration under two or more releases of one software ({drift['configurations']} "
            f"configurations): median signed blind error {_pct(drift['earliest'])} under the earliest release, "
            f"{_pct(drift['latest'])} under the latest, a median change of {drift['change'] * 100:+.0f} points: "
            "the model, layout and hardware being the same, the change is the software's.",
            "",
        ]
    release_table += release_steps_section(summ.get("release_steps"))
    return "\n".join([
        f"Published MoE training steps ({data}) priced by the step model from the model, layout, GPU and network "
        "(blind) and fitted on the other sources' rows of the same GPU generation (calibrated). Error = "
        f"(model - measured) / measured; every row above {EXPLAIN_ABOVE:.0%} and every unpriced row names its reason.",
        "",
        headline(summ),
        "",
        *release_table,
        tabulate(pair_rows, ["A/B pair", "setting", "change", "measured ratio", "predicted ratio", "ratio err",
                             "direction"], tablefmt="github", disable_numparse=True),  # fmt: skip
        "",
        tabulate(rows, head, tablefmt="github", disable_numparse=True),
        "",
    ])  # fmt: skip


def add_arguments(p) -> None:
    """The options only a step table takes (``monta predict published``)."""
    p.add_argument(
        "--compute-table",
        action="append",
        default=None,
        metavar="FILE",
        help="a GPU's measured compute (data/measured/gpu-compute-h100.json, tools/gpu_compute_table.py): its GEMM "
        "and attention efficiencies replace the cluster file's for the step rows on the GPU it measured "
        "(repeatable; step tables only)",
    )
    p.add_argument(
        "--calibrate-with",
        action="append",
        default=None,
        metavar="FILE",
        help="another step table whose rows join the calibration's pools (leave one source out: a source key both "
        "files use never calibrates its own rows) and are not scored: a file of your own runs calibrated with "
        "data/published/steps.csv (repeatable; step tables only)",
    )
    p.add_argument(
        "--same-source",
        action="append",
        default=None,
        metavar="KEY,KEY",
        help="source keys the leave-one-source-out calibration leaves out together, as one source (one publisher's "
        "pages, e.g. bridge-perf,bridge-perf-archive; repeatable; step tables only)",
    )
    p.add_argument(
        "--step-calibration",
        choices=[*ESTIMATORS, "nested"],
        default=None,
        help=f"how the other sources' rows calibrate a row (default {DEFAULT_ESTIMATOR}; 'nested': chosen per "
        "held-out source by a leave-one-source-out over the remaining sources; docs/results/published-steps.md, "
        "Calibration; step tables only)",
    )


def compute_tables(paths) -> list:
    """The measured tables at ``paths``; a bad one is a usage error saying why."""
    from monta import validate as V
    from monta.perfmodel.training.measured_compute import load_compute_table

    try:
        return [load_compute_table(p) for p in paths]
    except ValueError as e:
        raise V.UsageError(str(e)) from None


def same_sources(values) -> list[set]:
    """``--same-source`` values as sets of keys; one naming fewer than two keys, or a key twice over, is a usage
    error."""
    from monta import validate as V

    out, seen = [], set()
    for v in values:
        keys = {k.strip() for k in v.split(",") if k.strip()}
        if len(keys) < 2:
            raise V.UsageError(f"--same-source {v!r}: name two or more source keys, comma-separated")
        if keys & seen:
            raise V.UsageError(f"--same-source {v!r}: {sorted(keys & seen)[0]} is in another --same-source already")
        seen |= keys
        out.append(keys)
    return out


def reference_rows(path) -> list:
    """The rows of a ``--calibrate-with`` file; one that is not a step table is a usage error saying so."""
    from monta import validate as V

    if not Path(path).is_file():
        raise V.UsageError(f"--calibrate-with {path}: no such file")
    if not is_step_table(path):
        raise V.UsageError(
            f"--calibrate-with {path}: not a step table (it needs metric, value, gpu and layers columns and no "
            "collective column): give a file with data/published/steps.csv's columns"
        )
    return read_step_rows(path)


def unused_table(data, recs, tables) -> None:
    """A usage error for a table that priced no row: its GPU is no priced row's (an H200's table against a file
    of H100 rows would otherwise be taken silently for the H100's)."""
    from monta import validate as V

    for t in tables:
        if not any(r["compute_table"] == t.path for r in recs):
            gpus = sorted({r["gpu"] for r in recs if r["cluster"] == t.cluster}) or ["none"]
            raise V.UsageError(
                f"--compute-table {t.path}: measured on {t.device} ({t.gpu}), but the {t.cluster} rows of {data} "
                f"ran on {', '.join(gpus)}: drop it or give a table measured on their GPU"
            )


def run(args) -> int:
    """The command's body for a step table (``args`` of ``monta predict published``)."""
    from monta.perfmodel.reports.out_files import write_jsonl, write_text

    tables = compute_tables(getattr(args, "compute_table", None) or ())
    reference = [row for f in getattr(args, "calibrate_with", None) or () for row in reference_rows(f)]
    same = same_sources(getattr(args, "same_source", None) or ())
    rows = read_step_rows(args.data)
    recs, prs = price_steps(rows, tables, getattr(args, "step_calibration", None), reference, same)
    unused_table(args.data, recs, tables)
    summ = step_summary(recs, prs, rows)
    text = markdown(args.data, recs, prs, summ)
    print(text)
    if args.md:
        write_text(args.md, text)
        print(f"wrote {args.md}")
    if args.out:
        out = [{"kind": "published-step", **r} for r in recs] + [{"kind": "published-step-pair", **p} for p in prs]
        out.append({"kind": "published-step-summary", **summ})
        write_jsonl(args.out, out)
        print(f"wrote {len(out)} records to {args.out}")
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summ, indent=1))
    return 0
