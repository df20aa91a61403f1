"""``monta predict published``'s command: the tables it prints and the records it writes
(``monta.perfmodel.reports.published`` prices the rows, ``monta.perfmodel.reports.claims`` checks the claims)."""

from __future__ import annotations

from pathlib import Path

from monta.perfmodel.reports.published import EXPLAIN_ABOVE, price, read_rows, summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.0f}%"


def _abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def table(recs: list[dict]) -> str:
    """Every row: measured, blind and calibrated, errors and reasons (a Markdown table)."""
    from tabulate import tabulate

    from monta.units import format_size

    rows = [
        [
            r["id"],
            r["source"],
            r["collective"],
            r["cluster"] or "-",
            format_size(r["size_bytes"]) if r["size_bytes"] else "-",
            (r["metric"] or "-").replace("_GBps", " GB/s").replace("_us", " us"),
            _num(r["measured"]),
            _num(r["predicted_blind"]),
            _pct(r["error_blind"]),
            _num(r["predicted_calibrated"]),
            _pct(r["error_calibrated"]),
            _pct(r.get("error_calibrated_loso")),
            r["health"],
            r.get("seen") or "",
            r["reason"] or "",
        ]
        for r in recs
    ]
    head = ["id", "source", "collective", "cluster", "size", "metric", "measured", "blind", "err", "calibrated",
            "err", "err (LOSO)", "health", "seen", "reason"]  # fmt: skip
    return tabulate(rows, head, tablefmt="github", disable_numparse=True)


def source_table(summ: dict) -> str:
    from tabulate import tabulate

    rows = [
        [s, v["rows"], _abs_pct(v["median_blind_error"]), _abs_pct(v["median_calibrated_error"]),
         _abs_pct(v["median_calibrated_loso_error"])]
        for s, v in sorted(summ["per_source"].items())
    ]  # fmt: skip
    head = ["source", "rows", "median abs. blind error", "calibrated (leave row out)", "calibrated (leave source out)"]
    return tabulate(rows, head, tablefmt="github")


def population_table(summ: dict) -> str:
    """The scores per population (published_scores): rows, priced, median absolute error of each prediction."""
    from tabulate import tabulate

    rows = [
        [name, v["rows"], v["priced_blind"], _abs1(v["median_blind_error"]), v["priced_calibrated"],
         _abs1(v["median_calibrated_error"]), v["priced_calibrated_loso"], _abs1(v["median_calibrated_loso_error"])]
        for name, v in summ["populations"].items()
    ]  # fmt: skip
    head = ["population", "rows", "priced blind", "median abs. error, blind", "priced (row out)",
            "calibrated (row out)", "priced (source out)", "calibrated (source out)"]  # fmt: skip
    return tabulate(rows, head, tablefmt="github", disable_numparse=True)


def _abs1(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def headline(summ: dict, recs: list[dict]) -> str:
    big = [r for r in recs if r["error_blind"] is not None and abs(r["error_blind"]) > EXPLAIN_ABOVE]
    unpriced = [r for r in recs if r["predicted_blind"] is None]

    def pct(x):
        return "-" if x is None else f"{x * 100:.1f}%"

    unseen = summ["populations"]["healthy, unseen"]
    return (
        f"{summ['rows']} rows from {summ['sources']} sources; priced blind {summ['priced_blind']}, calibrated "
        f"{summ['priced_calibrated']}. Healthy nccl-tests rows: {summ['healthy_nccl_rows']}, median abs. error blind "
        f"{pct(summ['median_blind_error'])} ({pct(unseen['median_blind_error'])} on the {unseen['priced_blind']} "
        f"unseen ones), calibrated {pct(summ['median_calibrated_error'])} leaving the row out, "
        f"{pct(summ['median_calibrated_loso_error'])} leaving its source out. "
        f"{len(big)} rows above {EXPLAIN_ABOVE:.0%} blind error and {len(unpriced)} unpriced, each with its reason."
    )


def _cmd(args) -> int:
    import json

    from monta.cli_args import check_outs
    from monta.perfmodel.reports.claims import check_claims
    from monta.perfmodel.reports.out_files import write_jsonl, write_text
    from monta.perfmodel.reports.published_steps import is_step_table

    check_outs(args, "out", "md")  # neither replaces a file unless --force says so
    if Path(args.data).is_file() and is_step_table(args.data):  # a table of training steps, not collectives
        from monta.perfmodel.reports.published_steps_cli import run

        return run(args)
    if getattr(args, "compute_table", None):
        from monta import validate as V

        raise V.UsageError(f"--compute-table prices training steps: {args.data} is not a step table (drop it)")
    if getattr(args, "step_calibration", None):
        from monta import validate as V

        raise V.UsageError(f"--step-calibration calibrates training steps: {args.data} is not a step table (drop it)")
    recs = price(read_rows(args.data))
    summ = summary(recs)
    claims = check_claims(args.claims) if args.claims else []
    text = markdown(args.data, recs, summ, claims)
    print(text)
    if args.md:
        write_text(args.md, text)
        print(f"wrote {args.md}")
    if args.out:
        out = [{"kind": "published", **r} for r in recs]
        out += [{"kind": "published-claim", **c} for c in claims]
        out.append({"kind": "published-summary", **summ})
        write_jsonl(args.out, out)
        print(f"wrote {len(out)} records to {args.out}")
    if args.summary_json:
        write_text(args.summary_json, json.dumps(summ, indent=1))
    return 0


def claims_table(claims: list[dict]) -> str:
    from tabulate import tabulate

    rows = [[c["id"], c["kind"], c.get("role", "test"), c["verdict"],
             "; ".join(x["model"] for x in c["checks"]) or c.get("why", "")]
            for c in claims]  # fmt: skip
    return tabulate(rows, ["claim", "kind", "role", "model", "what the model says"], tablefmt="github")


def claims_line(claims: list[dict]) -> str:
    """Claims count only where they test the model (role "test"); the rest are listed by role."""
    tests = [c for c in claims if c.get("role", "test") == "test"]
    agree = sum(c["verdict"] == "agrees" for c in tests)
    rest: dict[str, list[str]] = {}
    for c in claims:
        if c.get("role", "test") != "test":
            rest.setdefault(c["role"], []).append(c["id"])
    listed = "; ".join(f"{role}: {', '.join(ids)}" for role, ids in rest.items())
    return f"Claims that test the model: {len(tests)}, agreeing {agree}. Not counted ({listed or 'none'})."


def markdown(data: str, recs: list[dict], summ: dict, claims: list[dict]) -> str:
    """The whole page: the headline, per source, the claims, then every row."""
    parts = [
        f"Published measurements ({data}) priced by the model from their hardware alone (blind) and fitted on "
        "the other healthy rows of the same hardware (calibrated). Error = (model - measured) / measured.",
        "",
        headline(summ, recs),
        "",
        population_table(summ),
        "",
        source_table(summ),
        "",
    ]
    if claims:
        parts += [claims_line(claims), "", claims_table(claims), ""]
    parts += [table(recs), ""]
    return "\n".join(parts)


def register(sub) -> None:
    """``monta predict published``: called by ``monta.perfmodel.reports.cli``."""
    p = sub.add_parser(
        "published",
        help="price published measurements (nccl-tests, MoE kernels, training steps) row by row, blind and calibrated",
        description="Price every row of a CSV of measurements made elsewhere (columns of "
        "data/published/collectives.csv) from its hardware alone (blind) and fitted on the other rows of the same "
        "hardware (calibrated); print the error per row and per source. A table of training steps (columns of "
        "data/published/steps.csv: metric, value, gpu, layers, no collective) is priced by the step model, with its "
        "A/B pairs.",
        formatter_class=__import__("argparse").ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data", default="data/published/collectives.csv", help="CSV of published measurements")
    p.add_argument("--claims", default=None, help="also check stated expectations (data/published/claims.csv)")
    from monta.cli_args import add_out_arguments

    add_out_arguments(p, "one JSONL record per row (plus claims and a summary)", append=False)
    p.add_argument(
        "--md",
        default=None,
        help="also write the tables as one Markdown page (the report's section; --force replaces it)",
    )
    p.add_argument("--summary-json", default=None, help=__import__("argparse").SUPPRESS)
    from monta.perfmodel.reports.published_steps_cli import add_arguments

    add_arguments(p)
    p.set_defaults(func=_cmd)
