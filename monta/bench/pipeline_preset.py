"""``monta bench alltoall|step --preset pipeline``: the settings the pipeline's 2 x 4 sweep and step run
with, read from config/default.yaml (its ``alltoall``, ``step`` and ``network`` sections, as
workflows/rules/launch.smk turns them into flags), never copied here; and, without the preset, which of a
run's settings differ from them.

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
_NETWORK = ("topology", "inter_gbps", "intra_gbps", "latency_us")
_EMULATOR_ONLY = (*_NETWORK, "tcp_cc", "min_chunk", "dilation")


def _read(path: Path) -> tuple[dict, dict]:
    """config/default.yaml's document and its network section (UsageError, one line, if unreadable)."""
    import yaml

    from monta.validate import UsageError

    try:
        doc = yaml.safe_load(path.read_text())
        return doc, doc["network"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as e:
        raise UsageError(f"--preset pipeline: cannot read the pipeline's settings from {path} ({e})") from None


def _network(net: dict, gbps: float) -> dict[str, Any]:
    """The network flags launch.smk's net_args passes at NIC rate ``gbps``."""
    if net["topology"] == "unshaped":
        s: dict[str, Any] = {"topology": "unshaped"}
    elif net["topology"] and not net["intra_gbps"]:
        s = {"topology": f"{net['topology']}@{gbps}"}
    else:
        s = {"inter_gbps": gbps, "intra_gbps": net["intra_gbps"] or None}
    return s | ({"latency_us": net["latency_us"]} if net["latency_us"] else {})


def step_settings(path: Path = CONFIG) -> dict[str, Any]:
    """Flag dest -> the value the pipeline passes to its step (its first step cluster, 2 x 4)."""
    from monta.validate import UsageError

    doc, net = _read(path)
    try:
        st = doc["step"]
        c = st["clusters"][0]
        s: dict[str, Any] = {
            "nodes": c["nodes"],
            "gpus_per_node": c["gpus_per_node"],
            "tp": c["tp"],
            "model": st["model"],
            "variants": ",".join(st["variants"]),
            "steps": st["steps"],
            "warmup": st["warmup"],
            "topk": st["topk"],
            "capacity_factor": st["capacity_factor"],
            "compute": st["compute"],
        }
        if st.get("micro_batch"):
            s["micro_batch"] = st["micro_batch"]
    except (KeyError, IndexError, TypeError) as e:
        raise UsageError(f"--preset pipeline: cannot read the pipeline's step settings from {path} ({e})") from None
    return s | _network(net, st["inter_gbps"] or net["inter_gbps"])


def pipeline_settings(path: Path = CONFIG) -> dict[str, Any]:
    """Flag dest -> the value the pipeline passes for its first alltoall cluster (the 2 x 4 sweep)."""
    from monta.validate import UsageError

    doc, net = _read(path)
    try:
        a = doc["alltoall"]
        c = a["clusters"][0]
    except (KeyError, IndexError, TypeError) as e:
        raise UsageError(f"--preset pipeline: cannot read the pipeline's settings from {path} ({e})") from None
    s: dict[str, Any] = {
        "nodes": c["nodes"],
        "gpus_per_node": c["gpus_per_node"],
        "tp": c["tp"],
        "sizes": c.get("sizes") or a["sizes"],
        "exchanges": ",".join(a["variants"]),
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
    return s | _network(net, c.get("inter_gbps") or net["inter_gbps"])


def parser_defaults(p: argparse.ArgumentParser) -> dict[str, Any]:
    """Every option's default, to tell a flag the user gave from one left alone."""
    return {a.dest: a.default for a in p._actions if a.option_strings}


def settings_for(bench: str) -> dict[str, Any]:
    return pipeline_settings() if bench == "alltoall" else step_settings()


def apply(args: argparse.Namespace, defaults: dict[str, Any], bench: str = "alltoall") -> None:
    """The preset's values for every setting the user left at its default (flags given win). The emulator's
    own settings (its network, clock and chunk floor) only where the ranks run on the emulator: under
    torchrun or srun the network is the cluster's, and a record must not claim a shaped one."""
    emulated = getattr(args, "launcher", "emulate") == "emulate"
    for dest, value in settings_for(bench).items():
        if not emulated and dest in _EMULATOR_ONLY:
            continue
        if getattr(args, dest, None) == defaults.get(dest):
            setattr(args, dest, value)


def differences(args: argparse.Namespace, bench: str = "alltoall") -> list[str]:
    """``--flag value (pipeline: value)`` for each setting of this run unlike the pipeline's."""
    from monta.bench.common_args import network

    settings = settings_for(bench)
    out = []
    for dest, want in settings.items():
        if dest in _NETWORK:
            continue
        have = getattr(args, dest, None)
        if dest == "tp" and have is None:
            have = args.gpus_per_node
        if have is None and dest in ("max_iters", "target_ci", "budget_s", "variants"):
            continue  # --adaptive's own defaults (the adaptive flag itself is compared); step: every variant
        if str(have) != str(want):
            out.append(f"--{dest.replace('_', '-')} {_shown(have)} (pipeline: {_shown(want)})")
    if args.launcher == "emulate":
        from monta.emulate.topology import topology_from_args

        keys = (*_NETWORK, "tcp_cc")
        wanted = argparse.Namespace(**{k: settings.get(k) for k in keys})
        here, there = network(args).describe(), topology_from_args(wanted).describe()
        if here != there:
            out.append(f"network {here} (pipeline: {there})")
    return out


def _shown(v: Any) -> str:
    return "on" if v is True else "off" if v is False else "unset" if v is None else str(v)


def preset(args: argparse.Namespace, bench: str) -> str | None:
    """Apply ``--preset`` (the line saying so), or the line naming the settings that differ from the
    pipeline's when none is given (None when there are none)."""
    what = {"alltoall": "2 x 4 sweep", "step": "2 x 4 step"}[bench]
    if getattr(args, "preset", None) == "pipeline":
        apply(args, args.parser_defaults, bench)
        return f"# --preset pipeline: the pipeline's {what} settings (config/default.yaml)"
    if not hasattr(args, "parser_defaults"):
        return None
    diff = differences(args, bench)
    return f"# unlike the pipeline's {what} (--preset pipeline runs it): " + "; ".join(diff) if diff else None


def add_preset_argument(p: argparse.ArgumentParser, what: str) -> None:
    """``--preset``, and the parser's defaults kept to tell flags given from flags left alone."""
    p.add_argument(
        "--preset",
        choices=PRESETS,
        default=None,
        help=f"pipeline: the pipeline's {what} settings from config/default.yaml for every flag not given "
        "(default: none; a run without it prints the settings that differ)",
    )
    p.set_defaults(parser_defaults=parser_defaults(p))
