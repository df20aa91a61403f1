"""What ``monta bench step`` prints (rank 0) once its steps are done: the header (model, layout, network,
chunks), the table of every variant (times in human units) and the footer (MFU, exposed communication,
paired speedups with their CIs, the compute clock's accounting, the host's CPU verdict)."""

from __future__ import annotations

from monta.bench.step.config import StepConfig
from monta.bench.step.records import BREAKDOWN
from monta.bench.step.router import router_lines
from monta.chunking import is_auto
from monta.units import format_duration


def _ms(value: float) -> str:
    return format_duration(value / 1e3)


def contention_text(c: float) -> str:
    if not c:
        return "contention 0: no contention, overlap gains are an upper bound"
    return f"contention {c:g}: compute waited while this rank's MoE exchange is in flight lasts {1 + c:g}x"


def ci_text(ci: list[float], n: int) -> str:
    """``[lo, hi]``, or why there is none (a bootstrap needs 3 or more paired steps)."""
    lo, hi = ci
    return f"[{lo:.3f}, {hi:.3f}]" if lo == lo and hi == hi else f"[no CI from {n} step{'s' if n != 1 else ''}]"


def print_header(run: StepConfig, layout, cfg, source: str) -> None:
    topo = run.topology
    print(
        f"# monta bench step: {cfg.name} ({cfg.num_layers} layers, hidden {cfg.hidden}, "
        f"{cfg.tokens_per_micro_batch} tokens/micro-batch) on {layout.describe()}, {run.steps} steps after "
        f"{run.warmup} warm-up, variants interleaved; source={source}"
    )
    if run.compute == "modeled":
        print(f"# {contention_text(run.contention)}")
    if topo:
        rate = lambda g: f"{g:g} Gbit/s" if g else "unshaped"  # noqa: E731
        ratio = (
            f", intra:inter {topo['intra_gbps'] / topo['inter_gbps']:.2f}"
            if topo.get("intra_gbps") and topo.get("inter_gbps")
            else ""
        )
        print(
            f"# topology {topo['name']}: intra {rate(topo.get('intra_gbps'))}, inter {rate(topo.get('inter_gbps'))}"
            f"{ratio}"
        )
    print(
        f"# chunks {run.chunks_used} (requested {run.chunks}"
        f"{', cluster ' + str(run.cluster) if is_auto(run.chunks) else ''}); "
        "times: median over steps (step: the slowest rank's; phases: the mean over ranks); *_bwd = exchange "
        "inside backward"
    )


def print_table(rows: list[tuple[str, dict]]) -> None:
    hdr = ["variant", "step", "p10", "p90", "speedup", "tok/s", "loss"] + list(BREAKDOWN) + ["exchange"]
    w0 = max([10] + [len(v) for v, _ in rows])
    print(" ".join(f"{h:>{w0 if i == 0 else 10}}" for i, h in enumerate(hdr)))
    for v, m in rows:
        cells = [
            v,
            _ms(m["step_ms"]),
            _ms(m["step_ms_p10"]),
            _ms(m["step_ms_p90"]),
            f"{m['speedup_vs_deepspeed']:.3f}" if m["speedup_vs_deepspeed"] else "-",
            f"{m['tokens_per_s']:.0f}",
            f"{m['loss']:.4f}",
        ] + [_ms(m["breakdown_ms"][k]) for k in hdr[7:]]
        print(" ".join(f"{c:>{w0 if i == 0 else 10}}" for i, c in enumerate(cells)))


def print_footer(run: StepConfig, rows: list[tuple[str, dict]]) -> None:
    from monta.bench.hostload import verdict

    if run.peak_tflops:
        print(
            f"# MFU on {run.device or 'this device'} (peak {run.peak_tflops:g} TFLOP/s): "
            + ", ".join(f"{v} {m['mfu']:.1%}" for v, m in rows)
        )
    print(
        "# exposed communication (waited for: forward exchanges, backward exchange waits, grad sync): "
        + ", ".join(f"{v} {_ms(m['exposed_comm_ms'])}" for v, m in rows)
    )
    print(
        "# speedup vs deepspeed = median of the paired per-step ratios [95% bootstrap CI]: "
        + ", ".join(
            f"{v} {m['speedup_vs_deepspeed']:.3f} " + ci_text(m["speedup_vs_deepspeed_ci"], len(m["samples_ms"]))
            for v, m in rows
            if m.get("speedup_vs_deepspeed_ci")
        )
    )
    if run.clock:
        print_clock(run, rows)
    for line in router_lines(run.routing, rows):
        print(line)
    for v, m in rows:
        print(f"# {v}: {verdict(m['host_cpu'])}")
    bound = [v for v, m in rows if m["cpu_bound"]]
    if bound:
        print(f"# CPU-BOUND: {', '.join(bound)}: these step times measure this machine's cores, not the links")


def print_clock(run: StepConfig, rows: list[tuple[str, dict]]) -> None:
    """The compute clock's pieces, and per variant what it priced and which math outlasted its target."""
    ck = run.clock
    print(
        f"# compute modeled: the {ck['full_model']} pieces on {ck['cluster']} x D = {ck['dilation']:.1f} "
        f"(per step, targets {', '.join(f'{k} {_ms(v / 1e3)}' for k, v in ck['pieces_us'].items())} a "
        f"layer forward, backward 2x; optimizer {_ms(ck['optimizer_us'] / 1e3)})"
    )
    for v, m in rows:
        c = m["clock"]
        late = ", ".join(f"{k} {n}x" for k, n in c["overruns"].items()) or "none"
        print(
            f"# {v}: clock {_ms(c['target_ms'])} of priced compute a step; math over its target: {late} "
            f"({_ms(c['overrun_ms'])}, {c['overrun_ms'] / m['step_ms']:.1%} of the step)"
            + (f"; contention added {_ms(c['contention_ms'])}" if run.contention else "")
        )


def report(run: StepConfig, layout, cfg, per_rank: list[dict]) -> None:
    """Build the records, write them to the run's --out (if any) and print the report."""
    from monta.bench.step.records import build_records
    from monta.results import write_records

    rows, records = build_records(run, layout, cfg, per_rank)
    if run.out:
        write_records(run.out, records, append=run.append)
    print_header(run, layout, cfg, records[0]["source"])
    print_table(rows)
    print_footer(run, rows)
    if run.out:
        print(f"# wrote {len(records)} records to {run.out}")
