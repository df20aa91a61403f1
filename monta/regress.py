"""`monta regress`: compare current records with a stored baseline and fail on a significant slowdown.

Matched by (kind, source, params minus run-specific fields); the slowdown is the Hodges-Lehmann ratio
(median of all pairwise current/baseline sample ratios) with a percentile-bootstrap CI. On the pairs of
`make reproduce` runs kept here it caught an injected 10% at as many or more points than the ratio of
medians it replaced, and flagged nothing in runs of unchanged code (docs/results/regression-gate.md).
Decision, for a threshold T (the slowdown the gate must catch): a point REGRESSED when its CI lies
wholly above 1 + T/2, improved when wholly below 1/(1 + T/2), inconclusive when the CI is wider than
T (its samples cannot tell a T slowdown from none), else ok. Deciding at the midpoint between "no
change" and "T slower" makes a T slowdown and no change equally far from the line, so both are
called right once the CI is narrower than T; a threshold on the CI's lower end at 1 + T could never
flag a slowdown of exactly T.

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
import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monta.results import read_records

# Params that say how a point was measured (or by whom), not which point it is.
RUN_SPECIFIC = frozenset({"run_id", "timestamp", "host", "seed", "iters", "warmup", "steps", "check", "out"})
# Metrics where bigger is better: the slowdown is baseline / current for them.
HIGHER_IS_BETTER = frozenset({"algbw_GBps", "busbw_GBps", "tokens_per_s"})
# Samples assumed behind a median that came without samples_* (p10/p90 only).
_PSEUDO_N = 10
_Z90 = 1.2815515655446004  # standard normal 90th percentile: p90 - p10 = 2 * z * sigma


def point_key(rec: Mapping[str, Any]) -> tuple:
    params = {k: v for k, v in rec["params"].items() if k not in RUN_SPECIFIC}
    return (rec["kind"], rec["source"], json.dumps(params, sort_keys=True, default=str))


def _samples_key(metric: str) -> str:
    """time_us -> samples_us, step_ms -> samples_ms; other metrics: samples_<metric>."""
    unit = metric.rsplit("_", 1)[-1]
    return f"samples_{unit}" if unit in ("us", "ms", "s") else f"samples_{metric}"


def samples(recs: Sequence[Mapping[str, Any]], metric: str, seed: int = 0) -> tuple[np.ndarray, str]:
    """All per-iteration samples of ``metric`` in ``recs``; where a record has none, a normal
    approximation from its median and p10/p90 (or the bare median). Returns (values, how)."""
    out: list[np.ndarray] = []
    how = "samples"
    rng = np.random.default_rng(seed)
    for r in recs:
        m = r["metrics"]
        if metric not in m or m[metric] is None:
            continue
        s = m.get(_samples_key(metric))
        if isinstance(s, list) and s:
            out.append(np.asarray(s, dtype=float))
            continue
        med = float(m[metric])
        p10, p90 = m.get(f"{metric}_p10"), m.get(f"{metric}_p90")
        if p10 is not None and p90 is not None and p90 >= p10:
            sigma = (float(p90) - float(p10)) / (2 * _Z90)
            out.append(med + sigma * rng.standard_normal(_PSEUDO_N))
            how = "p10/p90" if how == "samples" else how
        else:
            out.append(np.array([med]))
            how = "median"
    return (np.concatenate(out) if out else np.array([])), how


def shift_ratio(base: np.ndarray, cur: np.ndarray) -> float:
    """The Hodges-Lehmann estimate of how many times ``cur`` is ``base``: the median of all pairwise
    ratios cur_i / base_j (exp of the median pairwise log difference). Like a ratio of medians it
    shrugs off outliers, but it uses every sample of both runs, so it moves less from run to run."""
    return float(np.exp(np.median(np.subtract.outer(np.log(cur), np.log(base)))))


def bootstrap_ratio(
    base: np.ndarray, cur: np.ndarray, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """:func:`shift_ratio` of cur over base and its percentile-bootstrap confidence interval."""
    # > 0 for the logs (a normal approximation from p10/p90 can dip below zero)
    base, cur = (np.clip(np.asarray(x, dtype=float), np.finfo(float).tiny, None) for x in (base, cur))
    point = shift_ratio(base, cur)
    if len(base) < 2 and len(cur) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    lb, lc = np.log(base), np.log(cur)
    shifts = np.empty(n_boot)
    step = max(1, 4_000_000 // (len(lb) * len(lc)))  # replicates per batch: bounded memory
    for start in range(0, n_boot, step):
        k = min(step, n_boot - start)
        b = lb[rng.integers(0, len(lb), size=(k, len(lb)))]
        c = lc[rng.integers(0, len(lc), size=(k, len(lc)))]
        shifts[start : start + k] = np.median((c[:, :, None] - b[:, None, :]).reshape(k, -1), axis=1)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.exp(np.quantile(shifts, [alpha, 1 - alpha]))
    return point, float(lo), float(hi)


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


def compare(
    baseline: Sequence[Mapping[str, Any]],
    current: Sequence[Mapping[str, Any]],
    metric: str = "time_us",
    threshold: float = 0.10,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    judge_cpu_bound: bool = False,
    paired_with: str | None = None,
) -> list[dict[str, Any]]:
    """One row per matched point: slowdown (>1 = worse) with its CI, a status (``CPU-BOUND (...)``
    for a CPU-bound point unless ``judge_cpu_bound``), the ``verdict`` it had on its numbers alone,
    and which side was ``cpu_bound``. ``paired_with``: judge other variants relative to this one
    (:func:`relative_to`); a point is paired only where both runs could pair it."""
    if paired_with is not None:
        if metric in HIGHER_IS_BETTER:
            raise ValueError(f"--paired-with compares times; metric {metric!r} is not one")
        baseline, current = relative_to(baseline, paired_with, metric), relative_to(current, paired_with, metric)
    groups: dict[tuple, list[list]] = defaultdict(lambda: [[], []])
    for side, recs in ((0, baseline), (1, current)):
        for r in recs:
            if metric in r["metrics"]:
                groups[point_key(r)][side].append(r)
    rows = []
    for i, (key, (b, c)) in enumerate(sorted(groups.items())):
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
        status = decide(ratio, lo, hi, threshold)
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


CPU_BOUND = "CPU-BOUND"
WOULD_BE = {"REGRESSED": "slower", "improved": "faster", "inconclusive": "inconclusive", "ok": "ok"}


def decide(ratio: float, lo: float, hi: float, threshold: float) -> str:
    """REGRESSED / improved / inconclusive / ok for one point (see the module docstring)."""
    line = 1 + threshold / 2
    if lo > line:
        return "REGRESSED"
    if hi < 1 / line:
        return "improved"
    if hi - lo > threshold:
        return "inconclusive"
    return "ok"


def _human(value: float, metric: str) -> str:
    """A metric value for people: times in the unit that fits (us, ms, s), 3 significant digits, never
    scientific notation; other metrics with 3 significant digits."""
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}.get(metric.rsplit("_", 1)[-1])
    if scale is None:
        return _sig3(value)
    seconds = value * scale
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= factor or unit == "us":
            return f"{_sig3(seconds / factor)} {unit}"
    return _sig3(value)


def _sig3(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return str(x) if x else "0"
    rounded = round(x, 2 - math.floor(math.log10(abs(x))))
    return f"{rounded:.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def _short(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def format_table(rows: Sequence[Mapping[str, Any]], metric: str, threshold: float, confidence: float) -> str:
    paired = sorted({r["from"].split(" / ")[-1] for r in rows if " / " in r["from"]})
    head = (
        f"regress: metric {metric}, slowdown = current/baseline (median of all pairwise sample ratios)"
        + (
            f" (points marked '/ {paired[0]}': of the per-iteration time relative to {paired[0]} in the same "
            f"run, which cancels a drift of the whole run)"
            if paired
            else ""
        )
        + f"{' (inverted: higher is better)' if metric in HIGHER_IS_BETTER else ''}, "
        f"{confidence:.0%} bootstrap CI; threshold {threshold:.0%}: REGRESSED when the CI lies above "
        f"{1 + threshold / 2:.3f} (half the threshold), inconclusive when the CI is wider than {threshold:.2f}\n\n"
    )
    lines = [
        "| status | kind | source | point | baseline | current | slowdown | CI | n | from |",
        "|---|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        show = (lambda v: f"{v:.3f}x") if " / " in r["from"] else (lambda v: _human(v, metric))  # a paired ratio
        how = r["from"] + (
            f"; before its injected delay {r['without_injection']:.3f}"
            if r.get("without_injection") is not None
            else ""
        )
        lines.append(
            f"| {r['status']} | {r['kind']} | {r['source']} | {r['point']} | {show(r['baseline'])} | "
            f"{show(r['current'])} | {r['slowdown']:.3f} | [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] | {r['n']} | {how} |"
        )
    bad = sum(r["status"] == "REGRESSED" for r in rows)
    unsure = sum(r["status"] == "inconclusive" for r in rows)
    bound = [r for r in rows if r["status"].startswith(CPU_BOUND)]
    tail = f"\n\n{len(rows)} matched points, {bad} regressed, {unsure} inconclusive"
    tail += f", {len(bound)} CPU-bound (not judged).\n" if bound else ".\n"
    if bound:
        slower = sum(r["verdict"] == "REGRESSED" for r in bound)
        tail += (
            f"CPU-BOUND: {len(bound)} point(s) ran CPU-bound in the baseline or the current run (the ranks waited "
            f"for a core more than the limit): their times measure this machine's cores, not the code, so "
            f"they are not judged ({slower} would read slower); --judge-cpu-bound judges them.\n"
        )
    injected = sorted({(r["point"], r["injected"]) for r in rows if r.get("injected")})
    if injected:
        tail += (
            f"TEST AID: {len(injected)} current point(s) carry an injected slowdown (--inject-slowdown, "
            f"{', '.join(sorted({f'{100 * f:g}%' for _, f in injected}))}): a gate check, not a measurement.\n"
        )
        own = [r for r in rows if r.get("without_injection") is not None]
        if own:
            judged = [r for r in own if not r["status"].startswith(CPU_BOUND)]
            lo, hi = min(r["without_injection"] for r in own), max(r["without_injection"] for r in own)
            tail += (
                f"TEST AID: before their injected delay these points read {lo:.3f}-{hi:.3f} against the "
                f"baseline (the run's own drift); REGRESSED at {sum(r['status'] == 'REGRESSED' for r in judged)} "
                f"of {len(judged)} judged.\n"
            )
    return head + "\n".join(lines) + tail


def run(args: argparse.Namespace) -> int:
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence {args.confidence}: must be between 0 and 1, e.g. 0.95")
    if not (args.threshold == args.threshold and 0 < args.threshold < 10):
        raise ValueError(f"--threshold {args.threshold}: must be a slowdown between 0 and 10, e.g. 0.10 for 10%")
    if args.bootstrap < 100:
        raise ValueError(f"--bootstrap {args.bootstrap}: use at least 100 resamples (default 2000)")
    if args.seed < 0:
        raise ValueError(f"--seed {args.seed}: must be >= 0")
    if args.bootstrap > 1_000_000:
        raise ValueError(f"--bootstrap {args.bootstrap}: at most 1000000 resamples")
    if args.out:
        from monta.validate import out_path

        out_path(args.out)
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
    )
    if not rows:
        raise ValueError(
            f"no point of --current matches --baseline with metric {args.metric!r}: compare the same "
            "kind, source and params (size, variant, chunks, cluster shape)"
        )
    text = format_table(rows, args.metric, args.threshold, args.confidence)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
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
        default=0.10,
        help="the slowdown the gate must catch (default 0.10 = 10%%): a point regressed when its CI lies "
        "above 1 + threshold/2",
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
    p.add_argument("--out", help="also write the table (markdown) here")
    p.set_defaults(func=run)
