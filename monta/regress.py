"""`monta regress`: compare current records with a stored baseline and fail on a significant slowdown.

Matched by (kind, source, params minus run-specific fields); the slowdown is the Hodges-Lehmann ratio
(median of all pairwise current/baseline sample ratios) with a percentile-bootstrap CI within the run,
widened (in quadrature, log scale) by the between-run spread: how far a run of unchanged code lands
from the baseline (monta.regress_stats). A baseline file of several runs (records with different
``run_id``, e.g. three pipeline runs concatenated) measures that spread per point; a one-run baseline
gets ``--run-spread`` (0.025, measured on this project's stored pair). Why: two runs of unchanged
code put the 1-2 MiB AllGather 8.6-12% apart while each run's CI was 2-6% wide, and the gate that
trusted the CI alone flagged both.
Decision, for a threshold T (the slowdown the gate must catch): monta.regress_rule.GATE_RULE, the
words --help, the table and the docs quote (1 + T/2 is the midpoint between "no change" and "T
slower"; inconclusive: the noise cannot tell a T slowdown from none). On synthetic sweeps
with the stored spread and a 5-run baseline: 3 of 400 unchanged points flagged, 191 of 200 points
with an injected 10% (tests/test_regress_noise.py).

``--paired-with VARIANT`` (e.g. deepspeed) judges every other variant by its time relative to that
variant in the same iterations of the same run (the benchmark interleaves them), so a drift that
moves a whole run (this machine was 3-6% faster or slower at sizes up to 4 MiB between two runs of
the same code) cancels; the reference variant itself is still judged by its own time. It asks "did
this variant get slower against the reference?", not "did the shared code get slower?": run both.
It only helps where an iteration's timings move together: on the 2-core testbed's 1-4 MiB points
they do not, and it flagged an injected 10% no more often than absolute times
(docs/results/regression-gate.md).

A point whose records say ``cpu_bound`` (its ranks waited for a core more than the limit, in the
baseline or the current run) is not judged: its status is ``CPU-BOUND`` with the direction it would
have had (``CPU-BOUND (slower)``), shown and counted apart, and it fails the gate only with
``--judge-cpu-bound``. Its timing measures the machine's cores, not the exchange: on the 2-core
testbed two runs of the same code put such points up to 14% apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monta.atomic import write_atomic
from monta.cli_args import add_out_arguments, check_out
from monta.regress_rule import DEFAULT_THRESHOLD, GATE_RULE, decide, widen  # noqa: F401  (importers read them here)
from monta.regress_stats import (
    DEFAULT_RUN_SPREAD,
    HIGHER_IS_BETTER,
    RUN_SPECIFIC,
    _samples_key,
    bootstrap_ratio,
    noise_halfwidth,
    point_key,
    run_spreads,
    samples,
    shift_ratio,
)
from monta.regress_table import CPU_BOUND, _short, format_table
from monta.results import read_records


def relative_to(recs: Sequence[Mapping[str, Any]], ref: str, metric: str) -> list[dict[str, Any]]:
    """``recs`` with every non-``ref`` record's samples (and median) replaced by its per-iteration ratio
    to the ``ref`` variant's record of the same run and point (``chunks`` 1); marked ``paired: ref``.
    A record without such a partner, or whose sample count differs from it, is left absolute."""
    skey = _samples_key(metric)

    def partner_key(r: Mapping[str, Any]) -> tuple:
        params = {k: v for k, v in r["params"].items() if k not in RUN_SPECIFIC | {"variant", "chunks"}}
        return r["kind"], r["source"], r.get("run_id"), json.dumps(params, sort_keys=True, default=str)

    refs = {partner_key(r): r for r in recs if r["params"].get("variant") == ref and r["params"].get("chunks", 1) == 1}
    out = []
    for r in recs:
        partner = refs.get(partner_key(r))
        mine, theirs = r["metrics"].get(skey), (partner or {}).get("metrics", {}).get(skey)
        if (
            r["params"].get("variant") == ref
            or not isinstance(mine, list)
            or not isinstance(theirs, list)
            or len(mine) != len(theirs)
            or not mine
        ):
            out.append(r)
            continue
        ratios = (np.asarray(mine, dtype=float) / np.asarray(theirs, dtype=float)).tolist()
        metrics = {
            **r["metrics"],
            skey: ratios,
            metric: float(np.median(ratios)),
            "paired": ref,
            "absolute_metrics": r["metrics"],
        }
        metrics.pop(f"{metric}_p10", None), metrics.pop(f"{metric}_p90", None)
        out.append({**r, "metrics": metrics})
    return out


def _absolute(r: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record as measured (undoes :func:`relative_to`)."""
    return {**r, "metrics": r["metrics"]["absolute_metrics"]} if "absolute_metrics" in r["metrics"] else r


def _by_point(
    baseline: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]], metric: str
) -> dict[tuple, list[list]]:
    """Each point's [baseline records, current records] that carry ``metric``."""
    groups: dict[tuple, list[list]] = defaultdict(lambda: [[], []])
    for side, recs in ((0, baseline), (1, current)):
        for r in recs:
            if metric in r["metrics"]:
                groups[point_key(r)][side].append(r)
    return groups


def compare(
    baseline: Sequence[Mapping[str, Any]],
    current: Sequence[Mapping[str, Any]],
    metric: str = "time_us",
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    judge_cpu_bound: bool = False,
    paired_with: str | None = None,
    run_spread: float = DEFAULT_RUN_SPREAD,
) -> list[dict[str, Any]]:
    """One row per matched point: slowdown (>1 = worse) with its within-run CI (``ci_lo``/``ci_hi``)
    and that CI widened by the between-run spread (``lo``/``hi``, :func:`run_spreads`; ``run_spread``
    where the baseline holds one run), a status (``CPU-BOUND (...)`` for a CPU-bound point unless
    ``judge_cpu_bound``), the ``verdict`` it had on its numbers alone, and which side was
    ``cpu_bound``. ``paired_with``: judge other variants relative to this one (:func:`relative_to`);
    a point is paired only where both runs could pair it."""
    if paired_with is not None:
        if metric in HIGHER_IS_BETTER:
            raise ValueError(f"--paired-with compares times; metric {metric!r} is not one")
        baseline, current = relative_to(baseline, paired_with, metric), relative_to(current, paired_with, metric)
    spreads = run_spreads(baseline, metric, run_spread)
    rows = []
    for i, (key, (b, c)) in enumerate(sorted(_by_point(baseline, current, metric).items())):
        if not b or not c:
            continue
        paired = {side: {r["metrics"].get("paired") for r in recs} for side, recs in (("b", b), ("c", c))}
        if paired["b"] != paired["c"]:  # one run could pair the point, the other not: compare absolute times
            b, c = [_absolute(r) for r in b], [_absolute(r) for r in c]
        bs, bhow = samples(b, metric, seed + 2 * i)
        cs, chow = samples(c, metric, seed + 2 * i + 1)
        ref = next(iter({r["metrics"].get("paired") for r in c}), None)
        if ref:
            bhow, chow = f"{bhow} / {ref}", f"{chow} / {ref}"
        if not len(bs) or not len(cs):
            continue
        shown = float(np.median(bs)), float(np.median(cs))
        if metric in HIGHER_IS_BETTER:  # slowdown = base/cur  <=>  ratio of (1/x) medians
            bs, cs = 1.0 / bs, 1.0 / cs
        ratio, lo, hi = bootstrap_ratio(bs, cs, n_boot, confidence, seed + i)
        spread, runs = spreads.get(key, (run_spread, 1))
        noise = noise_halfwidth(spread, runs, confidence)
        status = decide(ratio, lo, hi, threshold, noise)
        bound = [
            side
            for side, recs in (("baseline", b), ("current", c))
            if any(r["metrics"].get("cpu_bound") is True for r in recs)
        ]
        judged = status
        if bound and not judge_cpu_bound:
            status = f"{CPU_BOUND} ({WOULD_BE[judged]})"
        params = json.loads(key[2])
        injected = next((r["metrics"]["injected_slowdown"] for r in c if r["metrics"].get("injected_slowdown")), None)
        rows.append(
            {
                "kind": key[0],
                "source": key[1],
                "point": _short(params),
                "baseline": shown[0],
                "current": shown[1],
                "slowdown": ratio,
                "ci_lo": lo,
                "ci_hi": hi,
                "lo": widen(ratio, lo, hi, noise)[0],
                "hi": widen(ratio, lo, hi, noise)[1],
                "spread": spread,
                "runs": runs,
                "n": f"{len(bs)}/{len(cs)}",
                "from": bhow if bhow == chow else f"{bhow}/{chow}",
                "status": status,
                "verdict": judged,
                "cpu_bound": "+".join(bound) or None,
                "injected": injected,
                "without_injection": _without_injection(b, c, metric) if injected and not ref else None,
            }
        )
    return rows


def _without_injection(b: Sequence[Mapping[str, Any]], c: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """TEST AID: the slowdown an injected point would read from its times before the injected delay
    (``samples_clean_us``), i.e. how far the run moved by itself; None where the records lack them."""
    if metric != "time_us":
        return None
    clean = [x for r in c for x in (r["metrics"].get("samples_clean_us") or [])]
    base, _ = samples(b, metric)
    return shift_ratio(base, np.asarray(clean)) if clean and len(base) else None  # the gate's own estimator


WOULD_BE = {"REGRESSED": "slower", "improved": "faster", "inconclusive": "inconclusive", "ok": "ok"}


def run(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence {args.confidence}: must be between 0 and 1, e.g. 0.95")
    if not (args.threshold == args.threshold and 0 < args.threshold < 10):
        raise ValueError(f"--threshold {args.threshold}: must be a slowdown between 0 and 10, e.g. 0.10 for 10%")
    if args.bootstrap < 100:
        raise ValueError(f"--bootstrap {args.bootstrap}: use at least 100 resamples (default 2000)")
    if not (args.run_spread == args.run_spread and 0 <= args.run_spread < 1):
        raise ValueError(f"--run-spread {args.run_spread}: must be a log-sd between 0 and 1, e.g. 0.025")
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: must be >= 0")
    if args.bootstrap > 1_000_000:
        raise ValueError(f"--bootstrap {args.bootstrap}: at most 1000000 resamples")
    check_out(args)
    base, cur = read_records(*args.baseline), read_records(*args.current)
    if args.paired_with is not None:
        known = {r["params"].get("variant") for r in base + cur}
        if args.paired_with not in known:
            raise ValueError(
                f"--paired-with {args.paired_with}: no such variant in the records; choose one of "
                f"{', '.join(sorted(str(v) for v in known))}"
            )
    rows = compare(
        base,
        cur,
        args.metric,
        args.threshold,
        args.confidence,
        args.bootstrap,
        args.seed,
        judge_cpu_bound=args.judge_cpu_bound,
        paired_with=args.paired_with,
        run_spread=args.run_spread,
    )
    if not rows:
        raise ValueError(
            f"no point of --current matches --baseline with metric {args.metric!r}: compare the same "
            "kind, source and params (size, variant, chunks, cluster shape)"
        )
    text = format_table(rows, args.metric, args.threshold, args.confidence)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, text)
    print(text, end="")
    regressed = [r for r in rows if r["status"] == "REGRESSED"]
    if regressed:
        print(f"monta regress: {len(regressed)} point(s) regressed by more than {args.threshold:.0%}", file=sys.stderr)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "regress",
        help="compare records with a stored baseline; exit 1 on a regression",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--baseline", nargs="+", required=True, help="baseline record file(s) (JSONL)")
    p.add_argument("--current", nargs="+", required=True, help="current record file(s) (JSONL)")
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="T, the slowdown the gate must catch: " + GATE_RULE.replace("%", "%%"),
    )
    p.add_argument(
        "--run-spread",
        type=float,
        default=DEFAULT_RUN_SPREAD,
        help=f"log-sd of a point's time between runs of unchanged code, used where the baseline holds one run "
        f"(default {DEFAULT_RUN_SPREAD}, measured on this project's stored pair); a baseline of several runs "
        "(records with different run_id) measures its own",
    )
    p.add_argument("--metric", default="time_us", help="metric to compare (default time_us)")
    p.add_argument("--confidence", type=float, default=0.95, help="bootstrap CI level (default 0.95)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (results are reproducible)")
    p.add_argument(
        "--judge-cpu-bound",
        action="store_true",
        help="judge points that ran CPU-bound too (default: shown as CPU-BOUND, never a regression)",
    )
    p.add_argument(
        "--paired-with",
        metavar="VARIANT",
        help="judge other variants by their time relative to VARIANT (e.g. deepspeed) in the same "
        "iterations of each run: cancels a drift of a whole run; VARIANT itself stays absolute",
    )
    add_out_arguments(p, "also the table (markdown)", append=False)
    p.set_defaults(func=run)
