"""``monta bench alltoall --preset pipeline``: the settings the pipeline's 2 x 4 sweep runs with, read from
config/default.yaml (its ``alltoall`` and ``network`` sections, as workflows/rules/launch.smk turns them
into flags), never copied here; and, without the preset, which of a bare run's settings differ from them.

Why: a bare ``monta bench alltoall`` is not the measurement the project trusts (no chunk floor, other
sizes, chunks and repetition); the preset runs that measurement, and the line of differences says what a
run without it changes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

CONFIG = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
PRESETS = ("pipeline",)


def pipeline_settings(path: Path = CONFIG) -> dict[str, Any]:
    """Flag dest -> the value the pipeline passes for its first alltoall cluster (the 2 x 4 sweep)."""
    import yaml

    from monta.validate import UsageError

    try:
        doc = yaml.safe_load(path.read_text())
        a, net = doc["alltoall"], doc["network"]
        c = a["clusters"][0]
    except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError) as e:
        raise UsageError(f"--preset pipeline: cannot read the pipeline's settings from {path} ({e})") from None
    s: dict[str, Any] = {
        "nodes": c["nodes"],
        "gpus_per_node": c["gpus_per_node"],
        "tp": c["tp"],
        "sizes": c.get("sizes") or a["sizes"],
        "variants": ",".join(a["variants"]),
        "chunks": ",".join(map(str, a["chunks"])),
        "min_chunk": str(c.get("min_chunk") or a["min_chunk"]),
        "dtype": a["dtype"],
        "warmup": a["warmup"],
        "iters": a["iters"],
        "dilation": str(a["dilation"]),
        "check": bool(a["check"]),
    }
    if a["max_iters"] > a["iters"]:  # as launch.smk's repeat_args: adaptive only when it may go further
        s |= {"adaptive": True, "max_iters": a["max_iters"], "target_ci": a["target_ci"], "budget_s": a["budget_s"]}
    gbps = c.get("inter_gbps") or net["inter_gbps"]
    if net["topology"] == "unshaped":
        s["topology"] = "unshaped"
    elif net["topology"] and not net["intra_gbps"]:
        s["topology"] = f"{net['topology']}@{gbps}"
    else:
        s |= {"inter_gbps": gbps, "intra_gbps": net["intra_gbps"] or None}
    if net["latency_us"]:
        s["latency_us"] = net["latency_us"]
    return s


def parser_defaults(p: argparse.ArgumentParser) -> dict[str, Any]:
    """Every option's default, to tell a flag the user gave from one left alone."""
    return {a.dest: a.default for a in p._actions if a.option_strings}


def apply(args: argparse.Namespace, defaults: dict[str, Any]) -> None:
    """The preset's values for every setting the user left at its default (flags given win)."""
    for dest, value in pipeline_settings().items():
        if getattr(args, dest, None) == defaults.get(dest):
            setattr(args, dest, value)


def differences(args: argparse.Namespace) -> list[str]:
    """``--flag value (pipeline: value)`` for each setting of this run unlike the pipeline's sweep."""
    from monta.bench.common_args import network

    settings = pipeline_settings()
    out = []
    for dest, want in settings.items():
        if dest in ("topology", "inter_gbps", "intra_gbps", "latency_us"):
            continue
        have = getattr(args, dest, None)
        if dest == "tp" and have is None:
            have = args.gpus_per_node
        if have is None and dest in ("max_iters", "target_ci", "budget_s"):
            continue  # --adaptive's own defaults; the adaptive flag itself is compared
        if str(have) != str(want):
            out.append(f"--{dest.replace('_', '-')} {_shown(have)} (pipeline: {_shown(want)})")
    if args.launcher == "emulate":
        from monta.emulate.topology import topology_from_args

        keys = ("topology", "inter_gbps", "intra_gbps", "latency_us", "tcp_cc")
        wanted = argparse.Namespace(**{k: settings.get(k) for k in keys})
        here, there = network(args).describe(), topology_from_args(wanted).describe()
        if here != there:
            out.append(f"network {here} (pipeline: {there})")
    return out


def _shown(v: Any) -> str:
    return "on" if v is True else "off" if v is False or v is None else str(v)


def differences_line(args: argparse.Namespace) -> str | None:
    """The line a run without --preset prints, or None when it runs the pipeline's settings."""
    diff = differences(args)
    if not diff:
        return None
    return "# unlike the pipeline's sweep (--preset pipeline runs it): " + "; ".join(diff)
